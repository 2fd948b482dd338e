"""The add-model wizard's widgets offscreen: opened from the Models page, fit shown, progress followed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_sources import FakeSourcesClient
from PySide6.QtCore import Qt

from agent.api.sources import TransferState
from app.ui.add_model_dialog import AddModelDialog
from app.ui.main_window import MainWindow

pytestmark = pytest.mark.gui


@pytest.fixture
def window(open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, FakeSourcesClient]:
    fake = FakeSourcesClient()
    return open_main_window(fake), fake


def test_the_wizard_checks_the_fit_then_follows_the_download(window: tuple[MainWindow, FakeSourcesClient],
                                                              qtbot: Any) -> None:
    win, fake = window
    win.show_page("models")
    qtbot.mouseClick(win.models.get_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(win.findChildren(AddModelDialog)))
    dialog = win.findChildren(AddModelDialog)[0]
    assert not dialog.add_button.isEnabled() and not dialog.fit_button.isEnabled()
    qtbot.keyClicks(dialog.hf_repo, "acme/tiny-GGUF")
    qtbot.keyClicks(dialog.hf_file, "Q4_K_M")
    qtbot.keyClicks(dialog.model_id, "tiny")
    qtbot.mouseClick(dialog.fit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.fit_text.text().startswith("Fits: needs 3.00 GiB"))
    assert "Largest context that fits: 65536" in dialog.fit_text.text()

    qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.vm.state.value.transfer is not None)
    transfer_id = dialog.vm.state.value.transfer.id  # type: ignore[union-attr]
    assert dialog.cancel_button.isVisible() and not dialog.add_button.isEnabled()
    fake.advance(transfer_id, state=TransferState.RUNNING, stage="downloading", bytes_total=4 << 30)
    fake.advance(transfer_id, bytes_done=3 << 30)
    qtbot.waitUntil(lambda: dialog.progress.value() == 750)
    assert "3.00 of 4.00 GiB" in dialog.progress_text.text()
    fake.advance(transfer_id, state=TransferState.DONE, stage="done", bytes_done=4 << 30)
    qtbot.waitUntil(lambda: "added tiny" in dialog.progress_text.text())
    qtbot.waitUntil(lambda: win.ctx.fleet.snapshot.value.model("tiny") is not None)
    assert win.statusBar().currentMessage() == "Added tiny" and not dialog.cancel_button.isVisible()
    dialog.accept()


def test_the_ollama_page_lists_the_store(window: tuple[MainWindow, FakeSourcesClient], qtbot: Any) -> None:
    win, _fake = window
    dialog = win.open_add_model()
    qtbot.mouseClick(dialog.source_buttons.button(2), Qt.MouseButton.LeftButton)
    assert dialog.pages.currentIndex() == 2 and dialog.add_button.text() == "Import and add"
    qtbot.mouseClick(dialog.list_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.ollama_model.count() == 2)
    assert dialog.ollama_model.currentText() == "llama3.2:3b" and dialog.add_button.isEnabled()
    dialog.reject()
