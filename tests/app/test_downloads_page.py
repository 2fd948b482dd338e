"""The Downloads page against the in-memory daemon, real widgets: every transfer listed with its
progress, speed and time left; a running download paused, resumed and cancelled; a failed one
showing why and retried; a refused resume said on the page; and the list shown again by an app that
starts anew over the same daemon (the daemon owns it)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from helpers import cells
from PySide6.QtWidgets import QProgressBar

from agent.api.sources import TransferState
from app.ui.main_window import PAGES, MainWindow
from app.ui.pages.downloads import DownloadsPage
from daemon.api.sources import Transfer

GIB = 2**30


@pytest.fixture
def fake() -> FakeDaemonClient:
    daemon = FakeDaemonClient()
    now = time.time()
    daemon.add_transfer(Transfer(id="x1", kind="ollama", label="qwen3:8b", state=TransferState.DONE, stage="done",
                                 bytes_done=5 * GIB, bytes_total=5 * GIB, registered=["qwen3-8b"], created_at=now - 300,
                                 finished_at=now - 290))
    daemon.add_transfer(Transfer(id="x2", kind="url", label="https://example.net/phi.gguf", state=TransferState.FAILED,
                                 error="phi.gguf does not match its checksum", pausable=True, created_at=now - 200,
                                 finished_at=now - 100))
    daemon.add_transfer(Transfer(id="x3", kind="hf", label="acme/tiny-GGUF Q4_K_M", state=TransferState.RUNNING,
                                 stage="downloading", bytes_done=GIB, bytes_total=4 * GIB, pausable=True,
                                 created_at=now - 10))
    return daemon


def row_of(page: DownloadsPage, transfer_id: str) -> int:
    return next(r for r in range(page.table.rowCount()) if page.table.item(r, 0).data(0x0100) == transfer_id)


def state_of(page: DownloadsPage, transfer_id: str) -> str:
    return page.table.item(row_of(page, transfer_id), 5).text()


def select(page: DownloadsPage, transfer_id: str) -> None:
    page.table.selectRow(row_of(page, transfer_id))


def enabled(page: DownloadsPage) -> set[str]:
    return {verb for verb, b in page.buttons.items() if b.isEnabled()}


def test_downloads_is_a_page_with_its_icon() -> None:
    assert ("downloads", "Downloads") in PAGES
    assert (Path(__file__).resolve().parents[2] / "resources" / "icons" / "nav-downloads.svg").exists()


def test_pause_resume_cancel_retry_and_the_list_after_the_app_starts_again(
        window: MainWindow, fake: FakeDaemonClient, open_main_window: Any, qtbot: Any) -> None:
    window.show_page("downloads")
    page = window.downloads
    qtbot.waitUntil(lambda: page.table.rowCount() == 3)
    assert [row[:3] for row in cells(page.table)] == [
        ["acme/tiny-GGUF Q4_K_M", "Hugging Face", "workstation"], ["https://example.net/phi.gguf", "Download",
                                                                    "workstation"], ["qwen3:8b", "Ollama import", "workstation"]]
    assert state_of(page, "x1") == "Done: added qwen3-8b"
    assert state_of(page, "x2") == "Failed: phi.gguf does not match its checksum"
    bar = page.table.cellWidget(row_of(page, "x3"), 3).findChild(QProgressBar)
    assert bar.value() == 250 and page.table.item(row_of(page, "x3"), 4).text() == "1.0 GiB of 4.0 GiB"

    fake.publish("transfer.progress", None, id="x3", state="running", stage="downloading", bytes_done=2 * GIB,
                 bytes_total=4 * GIB, speed_bps=40 * 2**20, eta_s=51.2)  # what the daemon's feed sends
    qtbot.waitUntil(lambda: page.table.item(row_of(page, "x3"), 6).text() == "40.0 MiB/s")
    assert page.table.item(row_of(page, "x3"), 7).text() == "51 s"
    assert page.table.cellWidget(row_of(page, "x3"), 3).findChild(QProgressBar).value() == 500

    select(page, "x3")
    assert enabled(page) == {"pause", "cancel"}
    page.buttons["pause"].click()
    qtbot.waitUntil(lambda: state_of(page, "x3") == "Paused")
    assert enabled(page) == {"resume", "cancel"} and page.table.item(row_of(page, "x3"), 6).text() == "—"
    page.buttons["resume"].click()
    qtbot.waitUntil(lambda: state_of(page, "x3") == "Running")
    page.buttons["cancel"].click()
    qtbot.waitUntil(lambda: state_of(page, "x3") == "Cancelled")
    assert enabled(page) == {"retry"}

    select(page, "x2")  # the failed one says why, and runs again
    assert "does not match its checksum" in page.detail.text() and enabled(page) == {"retry"}
    page.buttons["retry"].click()
    qtbot.waitUntil(lambda: state_of(page, "x2") == "Running")

    select(page, "x1")  # a done one: no verb offered; asked anyway, the daemon's reason is shown
    assert enabled(page) == set()
    window.ctx.act(page.vm.resume("x1"))
    qtbot.waitUntil(lambda: "nothing to resume" in page.note.text())

    again = open_main_window(fake)  # the app started anew over the same daemon
    again.show_page("downloads")
    qtbot.waitUntil(lambda: again.downloads.table.rowCount() == 3)
    assert state_of(again.downloads, "x1") == "Done: added qwen3-8b"
    assert state_of(again.downloads, "x3") == "Cancelled"


def test_the_add_model_dialog_shows_the_speed_and_time_left_too() -> None:
    from app.viewmodels.add_model import AddModelState

    running = Transfer(id="x9", kind="hf", label="acme/tiny-GGUF Q4_K_M", state=TransferState.RUNNING,
                       bytes_done=GIB, bytes_total=4 * GIB, speed_bps=40 * 2**20, eta_s=76.8)
    assert AddModelState(transfer=running).progress_text == "Running — 1.00 of 4.00 GiB — 40.0 MiB/s, 76 s left"
