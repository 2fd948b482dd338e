"""The Requests page against the real daemon: what happened to a request, at 1024×700. The log
lists live (a new request shows without a click), filters by model, key, status and time, and one
request opens in full (model asked and served, node by name, key, status, times, tokens, why it
failed), picked in the list or found by its X-Request-Id; every column is in view, none scrolls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import cells

from app.ui.main_window import PAGES, MainWindow
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.requests import RequestsFilters, RequestsViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition, RequestRecord
from daemon.history import REQUESTS_KEEP_S
from daemon.nodes.store import NodeRecord

BOX = "b" * 64
HOME = "c" * 64  # the workstation, paired as a node (this daemon has no local agent)
LONG = "qwen25-coder-32b-instruct-abliterated-q8"  # as long as a model id may be (40)
T0 = time.time() - 600


@pytest.fixture(scope="module")
def keys(real_daemon: Any) -> dict[str, str]:
    """The real daemon with two models, two paired nodes (named, never reached) and two keys: k1 and k2's ids."""

    async def setup(deps: Any) -> dict[str, str]:
        for node_id, name, host in ((HOME, "workstation", "10.0.0.2"), (BOX, "gaming-pc", "10.0.0.5")):
            await deps.nodes.store.put(NodeRecord(id=node_id, name=name, host=host, port=9443, certificate_pem=""))
        for model_id in ("alpha", LONG):
            await deps.registry.add(ModelDefinition(id=model_id, served_name=model_id, node=HOME,
                                                    model_path=f"/models/{model_id}.gguf"))
        return {"k1": deps.keys.create("laptop").info.id, "k2": deps.keys.create("open-webui").info.id}

    return real_daemon.call(setup)


@pytest.fixture
def client(real_daemon: Any, keys: dict[str, str]) -> Iterator[DaemonClient]:
    """The app's client of the real daemon, its access log empty."""
    real_daemon.call(lambda deps: deps.history.maintain(now=time.time() + REQUESTS_KEEP_S + 3600))
    yield DaemonClient(*real_daemon, client_name="app")


def _rows(real_daemon: Any, keys: dict[str, str]) -> list[RequestRecord]:
    """Oldest first: an answer on this machine, a fallback's answer on a paired node, a refusal, a failure."""
    k1, k2 = keys["k1"], keys["k2"]
    rows = [
        RequestRecord(id="r-ok", ts=T0, model="alpha", node=HOME,
                      path="/v1/chat/completions", status=200, queue_ms=1.5, ttft_ms=140.0, total_ms=2400.0,
                      prompt_tokens=412, completion_tokens=243, key_id=k1),
        RequestRecord(id="r-fallback", ts=T0 + 10, model=LONG, node=BOX,
                      path="/v1/chat/completions", status=200, queue_ms=820.0, ttft_ms=300.0, total_ms=9100.0,
                      prompt_tokens=30, completion_tokens=500, key_id=k2, answered_by="alpha",
                      error=f"'{LONG}' did not answer: model_not_ready: The model is failed"),
        RequestRecord(id="r-refused", ts=T0 + 20, model=None, node=None, path="/v1/chat/completions",
                      status=404, queue_ms=0.0, total_ms=0.4, key_id=k1,
                      error="model_not_found: The model 'gpt-4o' does not exist."),
        RequestRecord(id="r-failed", ts=T0 + 30, model="alpha", node=HOME,
                      path="/v1/chat/completions", status=502, queue_ms=2.0, total_ms=31.0, key_id=k2,
                      error="upstream_unreachable: The runtime of 'alpha' could not be reached"),
    ]
    real_daemon.served(*rows)
    return rows


async def test_the_view_model_filters_and_opens_one_request(real_daemon: Any, keys: dict[str, str],
                                                            client: DaemonClient) -> None:
    _rows(real_daemon, keys)
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    vm = RequestsViewModel(fleet)
    await vm.refresh()
    assert [r.id for r in vm.state.value.rows] == ["r-failed", "r-refused", "r-fallback", "r-ok"]
    await vm.set_filters(RequestsFilters(status="5xx"))
    assert [r.id for r in vm.state.value.rows] == ["r-failed"]
    await vm.set_filters(RequestsFilters(model="alpha", key_id=keys["k2"]))  # asked for, or answering as a fallback
    assert [r.id for r in vm.state.value.rows] == ["r-failed", "r-fallback"]
    await vm.set_filters(RequestsFilters(slower_than_ms=5000))
    assert [r.id for r in vm.state.value.rows] == ["r-fallback"]
    assert list(vm.state.value.rows) == await client.requests(200, slower_than_ms=5000.0)  # what the page asked
    with pytest.raises(ValueError):
        await vm.set_filters(RequestsFilters(status="teapot"))

    await vm.open("r-refused")  # not in the filtered list: asked of the daemon
    assert vm.state.value.detail is not None and vm.state.value.detail.status == 404
    await vm.open("no-such-id")
    assert vm.state.value.detail is None and "no-such-id" in (vm.state.value.detail_error or "")
    await vm.read_keys()
    assert vm.state.value.key_name(keys["k2"]) == "open-webui" and vm.state.value.key_name("gone") == "gone"
    await client.close()


@pytest.mark.gui
def test_the_requests_page_at_1024_by_700(open_main_window: Callable[..., MainWindow], real_daemon: Any,
                                          keys: dict[str, str], client: DaemonClient, qtbot: Any) -> None:
    assert ("requests", "Requests") in PAGES
    _rows(real_daemon, keys)
    window = open_main_window(client, size=(1024, 700))
    page = window.requests
    page.vm.refresh_s = 0.05  # live: a modest timer while the page is in view
    window.show_page("requests")
    qtbot.waitUntil(lambda: page.table.rowCount() == 4)
    table = page.table
    rows = cells(table)
    assert [r[1:4] for r in rows] == [
        ["502", "alpha", "workstation"], ["404", "—", "—"], ["200", f"{LONG} → alpha", "gaming-pc"],
        ["200", "alpha", "workstation"]]
    assert rows[3][4:] == ["140 ms", "2.4 s", "412 + 243"]
    assert all(BOX not in " ".join(r) for r in rows)  # a node by its name, never its 64 hex digits

    # Every column in view, none a sliver; the long model name is elided, never scrolled to.
    qtbot.waitUntil(lambda: table.viewport().width() > 0)
    last = table.columnCount() - 1
    assert table.columnViewportPosition(last) + table.columnWidth(last) <= table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0
    metrics = table.horizontalHeader().fontMetrics()
    for col in range(table.columnCount()):
        header = table.horizontalHeaderItem(col).text()
        assert table.columnWidth(col) >= metrics.horizontalAdvance(header), header
    assert table.columnWidth(2) >= 150 and table.item(2, 2).toolTip() == f"{LONG} → alpha"
    assert window.width() <= 1024 and window.height() <= 700

    # A new request shows by itself.
    real_daemon.served(RequestRecord(id="r-new", ts=T0 + 40, model="alpha", node=HOME,
                                     path="/v1/completions", status=200, total_ms=90.0))
    qtbot.waitUntil(lambda: table.rowCount() == 5)
    assert table.item(0, 0).data(0x0100) == "r-new"  # Qt.UserRole: the request id

    # One request in full: the fallback that answered on the paired node.
    table.selectRow(3)
    field = {key: value for key, (_name, value) in page.fields.items()}
    qtbot.waitUntil(lambda: field["request"].value == "r-fallback")
    assert field["model"].value == LONG and field["served"].value == "alpha (a fallback)"
    assert field["node"].value == "gaming-pc" and field["key"].value == f"open-webui ({keys['k2']})"
    assert field["status"].value == "200 OK" and field["tokens"].value == "30 prompt + 500 completion"
    assert (field["queue"].value, field["ttft"].value, field["total"].value) == ("820 ms", "300 ms", "9.1 s")
    assert page.failure.text().startswith("On the way: ") and "model_not_ready" in page.failure.text()
    for key, label in field.items():  # in view at this size, each a whole line high, none cut off
        assert label.isVisible() and label.height() >= label.fontMetrics().height(), key
        assert label.visibleRegion().boundingRect().height() >= label.fontMetrics().height(), key
    assert field["model"].text() == LONG  # room for a model id as long as they come
    assert page.vm.state.value.detail is not None and page.vm.state.value.detail.id == "r-fallback"  # the daemon's

    table.selectRow(2)  # refused: no model, no node, and why
    qtbot.waitUntil(lambda: field["request"].value == "r-refused")
    assert field["node"].value == "— (no node ran it)" and field["status"].value == "404 Not Found"
    assert page.failure.text() == "Failed: model_not_found — The model 'gpt-4o' does not exist."

    # Found by the id a client got in X-Request-Id; an unknown one is said so.
    page.find_id.setText("r-ok")
    page.find_id.returnPressed.emit()
    qtbot.waitUntil(lambda: field["request"].value == "r-ok")
    page.find_id.setText("no-such-id")
    page.find_id.returnPressed.emit()
    qtbot.waitUntil(lambda: "no-such-id" in page.heading.text() and page.heading.isVisible())
    assert field["request"].value == ""

    # Filters: status, then model and key, then slower than.
    page.status.setCurrentIndex(page.status.findData("5xx"))
    qtbot.waitUntil(lambda: table.rowCount() == 1)
    assert cells(table)[0][1] == "502"
    page.status.setCurrentIndex(page.status.findData(""))
    page.model.setCurrentIndex(page.model.findData("alpha"))
    page.key.setCurrentIndex(page.key.findData(keys["k1"]))
    qtbot.waitUntil(lambda: [r[1] for r in cells(table)] == ["200"])
    assert (page.vm.state.value.filters.model, page.vm.state.value.filters.key_id) == ("alpha", keys["k1"])
    page.model.setCurrentIndex(0)
    page.key.setCurrentIndex(0)
    page.slower.setValue(5000)
    page.slower.editingFinished.emit()
    qtbot.waitUntil(lambda: [r[2] for r in cells(table)] == [f"{LONG} → alpha"])
    page.slower.setValue(600_000)
    page.slower.editingFinished.emit()
    qtbot.waitUntil(lambda: table.rowCount() == 0 and page.note.text() == "No requests match.")

    # Out of view, the page stops reading.
    window.show_page("audit")
    qtbot.waitUntil(lambda: page.vm._watching is None)
    asyncio.set_event_loop(None)


@pytest.mark.gui
def test_each_way_a_request_ends_reads_on_the_page(open_main_window: Callable[..., MainWindow], real_daemon: Any,
                                                   client: DaemonClient, qtbot: Any) -> None:
    for n, (status, answered_by) in enumerate(((200, None), (404, None), (429, None), (503, None), (200, LONG))):
        real_daemon.served(RequestRecord(id=f"r{n}", ts=T0 + n, model="alpha", node=HOME, status=status,
                                         path="/v1/chat/completions", answered_by=answered_by,
                                         error=None if status == 200 else f"refused with {status}"))
    win = open_main_window(client, size=(1024, 700))
    win.show_page("requests")
    qtbot.waitUntil(lambda: win.requests.table.rowCount() == 5)
    statuses = {r[1] for r in cells(win.requests.table)}
    assert {"200", "404", "429", "503"} <= statuses
    assert any("→" in r[2] for r in cells(win.requests.table))  # a fallback answered
    asyncio.set_event_loop(None)

