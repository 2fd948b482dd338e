"""The add-model wizard's widgets offscreen over the real daemon (its node "tower", the fake hub, an
Ollama store): opened from the Models page, fit shown, progress followed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from PySide6.QtCore import Qt
from test_add_model_vm import REPO, Fleet, fleet  # noqa: F401 - the module's node, hub and store

from app.ui.add_model_dialog import AddModelDialog
from app.ui.main_window import MainWindow
from daemon.api.client import DaemonClient

pytestmark = pytest.mark.gui


@pytest.fixture
def window(fleet: Fleet, open_main_window: Callable[..., MainWindow]) -> MainWindow:  # noqa: F811
    return open_main_window(DaemonClient(*fleet.daemon, client_name="app"))


def test_the_wizard_checks_the_fit_then_follows_the_download(window: MainWindow, fleet: Fleet,  # noqa: F811
                                                              qtbot: Any) -> None:
    win = window
    win.show_page("models")
    qtbot.mouseClick(win.models.get_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(win.findChildren(AddModelDialog)))
    dialog = win.findChildren(AddModelDialog)[0]
    assert not dialog.add_button.isEnabled() and not dialog.fit_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.node.text() == "tower")
    qtbot.keyClicks(dialog.hf_repo, "acme/slow-GGUF")
    qtbot.keyClicks(dialog.hf_file, "Q4_K_M")
    qtbot.keyClicks(dialog.model_id, "tiny")
    qtbot.mouseClick(dialog.fit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.fit_text.text().startswith("Fits: needs "), timeout=10_000)
    assert "Largest context that fits: " in dialog.fit_text.text()

    qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.vm.state.value.transfer is not None)
    assert dialog.cancel_button.isVisible() and not dialog.add_button.isEnabled()
    qtbot.waitUntil(lambda: 0 < dialog.progress.value() < 1000, timeout=30_000)
    assert " of 0.00 GiB" in dialog.progress_text.text(), "bytes done of the file's size (4 MiB)"
    qtbot.waitUntil(lambda: "added tiny" in dialog.progress_text.text(), timeout=60_000)
    qtbot.waitUntil(lambda: win.ctx.fleet.snapshot.value.model("tiny") is not None)
    assert win.statusBar().currentMessage() == "Added tiny" and not dialog.cancel_button.isVisible()
    assert dialog.progress.value() == 1000
    dialog.accept()


def test_the_ollama_page_lists_the_store(window: MainWindow, fleet: Fleet, qtbot: Any) -> None:  # noqa: F811
    win = window
    dialog = win.open_add_model()
    qtbot.waitUntil(lambda: dialog.node.text() == "tower")
    qtbot.mouseClick(dialog.source_buttons.button(2), Qt.MouseButton.LeftButton)
    assert dialog.pages.currentIndex() == 2 and dialog.add_button.text() == "Import and add"
    qtbot.keyClicks(dialog.ollama_store, str(fleet.store))
    qtbot.mouseClick(dialog.list_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.ollama_model.count() == 2, timeout=10_000)
    assert dialog.ollama_model.currentText() == "llama3.2:3b" and dialog.add_button.isEnabled()
    dialog.reject()
