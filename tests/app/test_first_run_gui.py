"""The "Add your first model" card offscreen, over the real daemon and its local agent on a machine of
its own: shown on an empty fleet, the demo download (from the fake hub) followed from the click to a
registered, started model, the machine's Ollama models listed, the card gone once a model exists."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton
from real_daemon import RealDaemon, ask, daemon_on_a_machine, hub_in_thread

from app.ui.main_window import MainWindow
from daemon.api.client import DaemonClient
from daemon.api.demo_model import DEMO_HF_FILE, DEMO_HF_REPO, DEMO_MODEL_ID
from daemon.api.models import ModelState
from tests.agent.test_imports import ollama_store
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, FakeHub]]:
    """The daemon (no model), its machine's Ollama store holding llama3.2:3b, the hub the demo model's file."""
    root = tmp_path_factory.mktemp("first-run-gui")
    ollama_store(root / "ollama", name="llama3.2", tag="3b", projector=False)
    with hub_in_thread(root) as hub:
        hub.add(DEMO_HF_REPO, DEMO_HF_FILE, gguf_bytes() + bytes(4_000_000), chunk_delay=0.05)
        with daemon_on_a_machine(root) as found:
            yield found, hub


@pytest.fixture
def window(machine: tuple[RealDaemon, FakeHub], open_main_window: Callable[..., MainWindow], qtbot: Any) -> MainWindow:
    # the card looks once: first make sure the machine's agent answers (a loaded test machine is slow)
    qtbot.waitUntil(lambda: bool(ask(machine[0], lambda c: c.ollama_models())), timeout=30_000)
    return open_main_window(DaemonClient(*machine[0], client_name="app"))


def test_the_card_gets_the_demo_model_and_goes_away(window: MainWindow, machine: tuple[RealDaemon, FakeHub],
                                                    qtbot: Any) -> None:
    daemon, hub = machine
    card = window.overview.first_run
    qtbot.waitUntil(lambda: card.isVisible() and card.found_rows.count() > 0, timeout=30_000)
    names = [w.text() for w in card.findChildren(QLabel)]
    assert "llama3.2:3b" in names and "Ollama" in names  # the machine's Ollama models, one row each
    assert card.findChild(QPushButton, "AddFound-0").text() == "Add"
    window.show_page("models")
    assert window.models.first_run.isVisible()  # the Models page's empty state offers the same
    window.show_page("overview")

    qtbot.mouseClick(card.demo_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.ctx.first_run.state.value.demo_transfer is not None, timeout=30_000)
    assert not card.demo_button.isEnabled()
    qtbot.waitUntil(lambda: 0 < card.progress.value() < 1000, timeout=30_000)  # part of the file is in
    transfer = window.ctx.first_run.state.value.demo_transfer
    assert transfer is not None and card.progress_text.text().startswith("Running — ")
    assert card.progress_text.text().endswith(f" of {transfer.bytes_total / 1e6:.0f} MB")  # type: ignore[operator]
    hub.repos[DEMO_HF_REPO][DEMO_HF_FILE].chunk_delay = 0.0
    qtbot.waitUntil(lambda: not card.isVisible(), timeout=30_000)
    assert not window.models.first_run.isVisible()

    def demo_state() -> ModelState | None:
        return next((m.status.state for m in window.ctx.fleet.snapshot.value.models
                     if m.definition.id == DEMO_MODEL_ID), None)

    qtbot.waitUntil(lambda: demo_state() == ModelState.READY, timeout=30_000)  # started once registered
    assert daemon.call(lambda deps: deps.registry.get(DEMO_MODEL_ID)).sources.hf_repo == DEMO_HF_REPO
