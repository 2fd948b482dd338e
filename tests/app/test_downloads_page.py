"""The Downloads page against the real daemon, its local agent and the fake hub, real widgets: every
transfer listed with its progress, speed and time left; a running download paused, resumed and
cancelled; a failed one (its bytes do not match the hub's checksum) showing why and retried; a refused
resume said on the page; and the list shown again by an app that starts anew over the same daemon
(the daemon owns it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import cells
from PySide6.QtWidgets import QProgressBar
from real_daemon import RealDaemon, ask, daemon_on_a_machine, hub_in_thread

from agent.api.sources import HfFileRef, TransferState
from app.ui.main_window import PAGES
from app.ui.pages.downloads import DownloadsPage
from daemon.api.client import DaemonClient
from daemon.api.sources import DownloadQuery, OllamaImportQuery, Transfer
from tests.agent.test_imports import ollama_store
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

GIB = 2**30
TINY, PHI = "acme/tiny-GGUF", "acme/phi-GGUF"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, FakeHub]]:
    """The daemon with its local agent (Ollama's store holds llama3.2:3b) and the hub: tiny (slow to
    come, to be seen running) and phi (its bytes do not match the hub's SHA-256)."""
    root = tmp_path_factory.mktemp("downloads")
    ollama_store(root / "ollama", name="llama3.2", tag="3b", projector=False)
    with hub_in_thread(root) as hub:
        hub.add(TINY, "tiny-Q4_K_M.gguf", gguf_bytes() + bytes(6_000_000), chunk_delay=0.05)
        good = gguf_bytes() + bytes(100_000)
        hub.add(PHI, "phi-Q4_K_M.gguf", good, serve=good[:-1] + b"\x01")
        with daemon_on_a_machine(root) as found:
            yield found, hub


def transfer_once(daemon: RealDaemon, qtbot: Any, start: Callable[[DaemonClient], Any],
                  ok: Callable[[Transfer], bool]) -> Transfer:
    """A transfer ``start`` begins through the admin API, once ``ok`` holds of it."""
    started: Transfer = ask(daemon, start)

    def now() -> Transfer:
        return ask(daemon, lambda c: c.transfer(started.id))

    qtbot.waitUntil(lambda: ok(now()), timeout=60_000)
    return now()


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
        machine: tuple[RealDaemon, FakeHub], open_main_window: Any, qtbot: Any) -> None:
    daemon, hub = machine
    x1 = transfer_once(daemon, qtbot, lambda c: c.import_ollama(OllamaImportQuery(model="llama3.2:3b")),
                       lambda t: t.state == TransferState.DONE).id
    x2 = transfer_once(daemon, qtbot, lambda c: c.download(DownloadQuery(hf=HfFileRef(repo=PHI, quant="Q4_K_M"))),
                       lambda t: t.state == TransferState.FAILED).id
    x3 = transfer_once(daemon, qtbot, lambda c: c.download(DownloadQuery(hf=HfFileRef(repo=TINY, quant="Q4_K_M"))),
                       lambda t: t.bytes_done > 0).id
    labels = {t.id: t.label for t in ask(daemon, lambda c: c.transfers())}
    here = next(n.name for n in ask(daemon, lambda c: c.list_nodes()) if n.id == "local")
    window = open_main_window(DaemonClient(*daemon, client_name="app"))
    window.show_page("downloads")
    page = window.downloads
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=30_000)
    assert [row[:3] for row in cells(page.table)] == [[labels[x3], "Hugging Face", here],
                                                      [labels[x2], "Hugging Face", here],
                                                      [labels[x1], "Ollama import", here]]
    assert state_of(page, x1) == "Done: added llama3-2-3b"
    assert state_of(page, x2).startswith("Failed: ") and "checksum" in state_of(page, x2)

    # the running one, as the daemon's feed tells it: its bar, bytes, speed and time left move
    def bar() -> int:
        return int(page.table.cellWidget(row_of(page, x3), 3).findChild(QProgressBar).value())

    qtbot.waitUntil(lambda: 0 < bar() < 1000 and page.table.item(row_of(page, x3), 6).text() != "—", timeout=30_000)
    assert page.table.item(row_of(page, x3), 6).text().endswith("/s")
    assert page.table.item(row_of(page, x3), 4).text().endswith(" of 5.8 MiB")
    first = bar()
    qtbot.waitUntil(lambda: bar() > first, timeout=30_000)
    qtbot.waitUntil(lambda: page.table.item(row_of(page, x3), 7).text().endswith(" s"), timeout=30_000)

    select(page, x3)
    assert enabled(page) == {"pause", "cancel"}
    page.buttons["pause"].click()
    qtbot.waitUntil(lambda: state_of(page, x3) == "Paused", timeout=30_000)
    assert enabled(page) == {"resume", "cancel"} and page.table.item(row_of(page, x3), 6).text() == "—"
    page.buttons["resume"].click()
    qtbot.waitUntil(lambda: state_of(page, x3).startswith("Running"), timeout=30_000)
    page.buttons["cancel"].click()
    qtbot.waitUntil(lambda: state_of(page, x3) == "Cancelled", timeout=30_000)
    assert enabled(page) == {"retry"}

    select(page, x2)  # the failed one says why, and runs again (the hub sends the right bytes now, slowly)
    assert "checksum" in page.detail.text() and enabled(page) == {"retry"}
    phi = hub.repos[PHI]["phi-Q4_K_M.gguf"]
    phi.serve, phi.chunk_delay = None, 0.05
    page.buttons["retry"].click()
    qtbot.waitUntil(lambda: state_of(page, x2).startswith("Running"), timeout=30_000)

    select(page, x1)  # a done one: no verb offered; asked anyway, the daemon's reason is shown
    assert enabled(page) == set()
    window.ctx.act(page.vm.resume(x1))
    qtbot.waitUntil(lambda: "nothing to resume" in page.note.text(), timeout=30_000)

    again = open_main_window(DaemonClient(*daemon, client_name="app"))  # the app started anew over the same daemon
    again.show_page("downloads")
    qtbot.waitUntil(lambda: again.downloads.table.rowCount() == 3, timeout=30_000)
    assert state_of(again.downloads, x1) == "Done: added llama3-2-3b"
    assert state_of(again.downloads, x3) == "Cancelled"
    phi.chunk_delay = 0.0
    qtbot.waitUntil(lambda: state_of(again.downloads, x2).startswith("Done"), timeout=30_000)


def test_the_add_model_dialog_shows_the_speed_and_time_left_too() -> None:
    from app.viewmodels.add_model import AddModelState

    running = Transfer(id="x9", kind="hf", label="acme/tiny-GGUF Q4_K_M", state=TransferState.RUNNING,
                       bytes_done=GIB, bytes_total=4 * GIB, speed_bps=40 * 2**20, eta_s=76.8)
    assert AddModelState(transfer=running).progress_text == "Running — 1.00 of 4.00 GiB — 40.0 MiB/s, 76 s left"
