"""The "Add your first model" card offscreen: shown on an empty fleet, the demo download followed
from the click to a registered model, the found models listed, the card gone once a model exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_sources import FakeSourcesClient
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from agent.api.sources import ImportedModel, TransferState
from app.ui.main_window import MainWindow

pytestmark = pytest.mark.gui


@pytest.fixture
def window(open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, FakeSourcesClient]:
    fake = FakeSourcesClient([])
    return open_main_window(fake), fake


def test_the_card_gets_the_demo_model_and_goes_away(window: tuple[MainWindow, FakeSourcesClient], qtbot: Any) -> None:
    win, fake = window
    card = win.overview.first_run
    qtbot.waitUntil(lambda: card.isVisible() and card.found_rows.count() > 0)
    names = [w.text() for w in card.findChildren(QLabel)]
    assert "llama3.2:3b" in names and "Ollama" in names  # the machine's Ollama models, one row each
    assert card.findChild(QPushButton, "AddFound-0").text() == "Add"
    win.show_page("models")
    assert win.models.first_run.isVisible()  # the Models page's empty state offers the same
    win.show_page("overview")

    qtbot.mouseClick(card.demo_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(fake.called("download")))
    transfer_id = win.ctx.first_run.state.value.demo_transfer.id  # type: ignore[union-attr]
    assert not card.demo_button.isEnabled()
    fake.advance(transfer_id, state=TransferState.RUNNING, bytes_total=250_000_000)
    fake.advance(transfer_id, bytes_done=125_000_000)
    qtbot.waitUntil(lambda: card.progress.value() == 500)
    assert card.progress_text.text() == "Running — 125 of 250 MB"
    fake.advance(transfer_id, state=TransferState.DONE, result=[ImportedModel(
        name="gemma", model_path="/models/hf/gemma-3-270m-q4_k_m.gguf")])
    qtbot.waitUntil(lambda: not card.isVisible())
    assert fake.called("start_model") == [("gemma-3-270m",)]
    assert not win.models.first_run.isVisible()
