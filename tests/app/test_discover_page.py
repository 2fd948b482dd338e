"""The Discover page against the real daemon (its local agent) and the fake hub at 1024×700: the catalog
with the search box empty, a search's hits, a repository's quants, "Will it fit?" per node (the node
reads the file's header from the hub), and Download bringing the file and registering a catalog model
under its short name; no hits and a hub that does not answer are said; every column and button is in view."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from helpers import definition
from PySide6.QtCore import QPoint, Qt
from real_daemon import RealDaemon, daemon_on_a_machine, hub_in_thread, models_only

from app.ui.main_window import PAGES, MainWindow
from app.ui.pages.discover import size_text
from app.viewmodels.discover import DiscoverViewModel
from app.viewmodels.fleet import FleetViewModel
from daemon.api.catalog import catalog_entries
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes


def _repo(hub: FakeHub, repo: str, downloads: int, quants: list[str], *, projector: bool = False) -> None:
    """A GGUF repository of the hub, its quants in the order of their sizes (each a tiny GGUF, padded)."""
    name = repo.split("/")[1].removesuffix("-GGUF")
    hub.describe(repo, downloads=downloads, likes=downloads // 1000, updated="2025-05-02T12:00:00.000Z")
    for n, quant in enumerate(quants, 1):
        hub.add(repo, f"{name}-{quant}.gguf", gguf_bytes() + bytes(2**20 * n))
    if projector:
        hub.add(repo, f"mmproj-{name}-f16.gguf", gguf_bytes(arch="clip", layers=1))


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, FakeHub]]:
    """The daemon with its local agent, and the hub: two Qwen3 8B GGUF repositories, the catalog's Gemma 3 4B
    (with its vision projector) and Qwen's own safetensors."""
    root = tmp_path_factory.mktemp("discover")
    with hub_in_thread(root) as hub:
        _repo(hub, "unsloth/Qwen3-8B-GGUF", 310_000, ["Q4_K_M", "Q5_K_M", "Q8_0", "BF16"])
        _repo(hub, "bartowski/Qwen3-8B-GGUF", 95_000, ["IQ3_XS", "Q4_K_M", "Q6_K"])
        _repo(hub, "ggml-org/gemma-3-4b-it-GGUF", 180_000, ["Q4_K_M", "Q8_0"], projector=True)
        hub.describe("Qwen/Qwen3-8B", downloads=900_000)
        hub.add("Qwen/Qwen3-8B", "model-00001-of-00004.safetensors", bytes(100))
        with daemon_on_a_machine(root) as found:
            yield found, hub


@pytest.fixture
async def client(machine: tuple[RealDaemon, FakeHub]) -> AsyncIterator[DaemonClient]:
    models_only(machine[0], definition("alpha", node="local"))
    found = DaemonClient(*machine[0], client_name="app")
    yield found
    await found.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_view_model_searches_opens_checks_and_downloads(
        client: DaemonClient, machine: tuple[RealDaemon, FakeHub]) -> None:
    _daemon, hub = machine
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    vm = DiscoverViewModel(fleet)
    await vm.search("qwen3 8b")
    assert [r.id for r in vm.state.value.results] == ["unsloth/Qwen3-8B-GGUF", "bartowski/Qwen3-8B-GGUF"]
    await vm.open_repo("unsloth/Qwen3-8B-GGUF")
    files = vm.state.value.files
    assert files is not None and [q.quant for q in files.quants] == ["Q4_K_M", "Q5_K_M", "Q8_0", "BF16"]
    await vm.check_fit("unsloth/Qwen3-8B-GGUF", files.quants[0].file)
    [fit] = vm.state.value.fits
    assert fit.node == "local" and fit.fits is True
    # the node read that file's header from the hub
    assert "/unsloth/Qwen3-8B-GGUF/resolve/main/Qwen3-8B-Q4_K_M.gguf" in [s.path for s in hub.requests("hub")]
    await vm.search("")
    assert vm.state.value.results == () and vm.state.value.query == ""
    await vm.open_repo("Qwen/Qwen3-8B")
    assert "holds no GGUF" in (vm.state.value.files_error or "")


def _columns_in_view(table: Any) -> bool:
    header = table.horizontalHeader()
    return all(header.sectionViewportPosition(c) + header.sectionSize(c) <= table.viewport().width() + 1
               for c in range(table.columnCount()))


def _in_window(window: MainWindow, widget: Any) -> bool:
    top_left = widget.mapTo(window, QPoint(0, 0))
    return (widget.isVisible() and top_left.x() >= 0 and top_left.y() >= 0
            and top_left.x() + widget.width() <= window.width() and top_left.y() + widget.height() <= window.height())


@pytest.mark.gui
def test_the_discover_page_at_1024_by_700(open_main_window: Callable[..., MainWindow], machine: tuple[RealDaemon, FakeHub],
                                          qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, hub = machine
    models_only(daemon, definition("alpha", node="local"))
    assert ("discover", "Discover") in PAGES
    window = open_main_window(DaemonClient(*daemon, client_name="app"), size=(1024, 700))
    page = window.discover
    window.show_page("discover")
    assert window.stack.currentWidget() is page
    entries = catalog_entries()
    qtbot.waitUntil(lambda: page.catalog.rowCount() == len(entries), timeout=30_000)
    assert page.lists.currentWidget() is page.catalog and page.list_title.text() == "Picked for you"
    assert window.width() <= 1024 and window.height() <= 700
    qtbot.waitUntil(lambda: page.catalog.viewport().width() > 0, timeout=30_000)
    assert _columns_in_view(page.catalog)

    # a catalog entry opens its repository with its own quant picked; it fits; Download registers its name
    row = next(i for i, e in enumerate(entries) if e.name == "gemma3:4b")
    page.catalog.setCurrentCell(row, 0)
    qtbot.waitUntil(lambda: page.quants.rowCount() == 2, timeout=30_000)
    assert page.repo_title.text() == "ggml-org/gemma-3-4b-it-GGUF"
    assert page.selected_quant() is not None and page.selected_quant().file == "gemma-3-4b-it-Q4_K_M.gguf"
    assert "vision projector" in page.repo_note.text()
    qtbot.mouseClick(page.fit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.fit_note.text().startswith("✓ "), timeout=30_000)
    assert _in_window(window, page.download_button) and _in_window(window, page.fit_button)
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Models page" in page.status.text(), timeout=30_000)

    def gemma() -> ModelDefinition | None:  # the download done, the daemon registers it under its short name
        return daemon.call(lambda deps: deps.registry.get("gemma3-4b"))

    qtbot.waitUntil(lambda: gemma() is not None, timeout=30_000)
    registered = gemma()
    assert registered is not None and registered.served_name == "gemma3:4b" and registered.node == "local"
    assert registered.model_path.endswith("gemma-3-4b-it-Q4_K_M.gguf") and "--mmproj" in registered.extra_args

    # a search lists the hub's repositories, most downloaded first
    qtbot.keyClicks(page.search, "qwen3 8b")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.results.rowCount() == 2, timeout=30_000)
    assert page.lists.currentWidget() is page.results
    assert [page.results.item(r, 0).toolTip() for r in range(2)] == ["unsloth/Qwen3-8B-GGUF",
                                                                     "bartowski/Qwen3-8B-GGUF"]
    assert page.results.item(0, 1).text() == "310k" and page.results.item(0, 3).text() == "2025-05-02"
    assert _columns_in_view(page.results)
    page.results.setCurrentCell(1, 0)
    qtbot.waitUntil(lambda: page.repo_title.text() == "bartowski/Qwen3-8B-GGUF" and page.quants.rowCount() == 3,
                    timeout=30_000)
    assert [page.quants.item(r, 0).text() for r in range(3)] == ["IQ3_XS", "Q4_K_M", "Q6_K"]
    q4 = len(hub.repos["bartowski/Qwen3-8B-GGUF"]["Qwen3-8B-Q4_K_M.gguf"].data)
    assert page.quants.item(1, 1).text() == size_text(q4) == "2 MiB" and _columns_in_view(page.quants)
    assert page.results.item(1, 0).text() == "Qwen3-8B-GGUF\nbartowski"

    # nothing found; the hub away; the box cleared shows the catalog again
    page.search.setText("zzz-nothing")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "no GGUF repository" in page.list_note.text(), timeout=30_000)
    assert page.results.rowCount() == 0
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")  # the hub does not answer
    page.search.setText("qwen3")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "cannot reach the Hugging Face hub" in page.list_note.text(), timeout=30_000)
    page.search.clear()
    qtbot.waitUntil(lambda: page.lists.currentWidget() is page.catalog, timeout=30_000)
