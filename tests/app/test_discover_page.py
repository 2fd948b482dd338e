"""The Discover page against the in-memory daemon at 1024×700: the catalog with the search box empty,
a search's hits, a repository's quants, "Will it fit?" per node, and Download starting the daemon's
download (a catalog model registered under its short name); no hits and a hub that does not answer
are said; every column and button is in view."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from PySide6.QtCore import QPoint, Qt

from app.ui.main_window import PAGES, MainWindow
from app.viewmodels.discover import DiscoverViewModel
from app.viewmodels.fleet import FleetViewModel
from daemon.api.catalog import catalog_entries
from daemon.api.sources import DownloadQuery


@pytest.fixture
def fake() -> FakeDaemonClient:
    return FakeDaemonClient([definition("alpha")])


async def test_the_view_model_searches_opens_checks_and_downloads(fake: FakeDaemonClient) -> None:
    fleet = FleetViewModel(fake, host_refresh_s=3600)
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
    [(asked,)] = fake.called("fit")
    assert asked.hf is not None and (asked.hf.repo, asked.hf.file) == ("unsloth/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf")
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
def test_the_discover_page_at_1024_by_700(open_main_window: Callable[..., MainWindow], fake: FakeDaemonClient,
                                          qtbot: Any) -> None:
    assert ("discover", "Discover") in PAGES
    window = open_main_window(fake, size=(1024, 700))
    page = window.discover
    window.show_page("discover")
    assert window.stack.currentWidget() is page
    entries = catalog_entries()
    qtbot.waitUntil(lambda: page.catalog.rowCount() == len(entries))
    assert page.lists.currentWidget() is page.catalog and page.list_title.text() == "Picked for you"
    assert window.width() <= 1024 and window.height() <= 700
    qtbot.waitUntil(lambda: page.catalog.viewport().width() > 0)
    assert _columns_in_view(page.catalog)

    # a catalog entry opens its repository with its own quant picked; it fits; Download registers its name
    row = next(i for i, e in enumerate(entries) if e.name == "gemma3:4b")
    page.catalog.setCurrentCell(row, 0)
    qtbot.waitUntil(lambda: page.quants.rowCount() == 2)
    assert page.repo_title.text() == "ggml-org/gemma-3-4b-it-GGUF"
    assert page.selected_quant() is not None and page.selected_quant().file == "gemma-3-4b-it-Q4_K_M.gguf"
    assert "vision projector" in page.repo_note.text()
    qtbot.mouseClick(page.fit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.fit_note.text().startswith("✓ "))
    assert _in_window(window, page.download_button) and _in_window(window, page.fit_button)
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(fake.called("download")))
    [(query,)] = fake.called("download")
    assert isinstance(query, DownloadQuery) and query.hf is not None
    assert (query.hf.repo, query.hf.file, query.node) == ("ggml-org/gemma-3-4b-it-GGUF", "gemma-3-4b-it-Q4_K_M.gguf",
                                                           "local")
    assert (query.model_id, query.served_name) == ("gemma3-4b", "gemma3:4b")
    assert "Models page" in page.status.text()

    # a search lists the hub's repositories, most downloaded first
    qtbot.keyClicks(page.search, "qwen3 8b")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.results.rowCount() == 2)
    assert page.lists.currentWidget() is page.results
    assert [page.results.item(r, 0).toolTip() for r in range(2)] == ["unsloth/Qwen3-8B-GGUF",
                                                                     "bartowski/Qwen3-8B-GGUF"]
    assert page.results.item(0, 1).text() == "310k" and page.results.item(0, 3).text() == "2025-05-02"
    assert _columns_in_view(page.results)
    page.results.setCurrentCell(1, 0)
    qtbot.waitUntil(lambda: page.repo_title.text() == "bartowski/Qwen3-8B-GGUF" and page.quants.rowCount() == 3)
    assert [page.quants.item(r, 0).text() for r in range(3)] == ["IQ3_XS", "Q4_K_M", "Q6_K"]
    assert page.quants.item(1, 1).text() == "4.7 GiB" and _columns_in_view(page.quants)
    assert page.results.item(1, 0).text() == "Qwen3-8B-GGUF\nbartowski"

    # nothing found; the hub away; the box cleared shows the catalog again
    page.search.setText("zzz-nothing")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "no GGUF repository" in page.list_note.text())
    assert page.results.rowCount() == 0
    fake.hub_down = True
    page.search.setText("qwen3")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "cannot reach the Hugging Face hub" in page.list_note.text())
    page.search.clear()
    qtbot.waitUntil(lambda: page.lists.currentWidget() is page.catalog)
