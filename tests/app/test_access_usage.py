"""The Access page shows each API key's use: requests and tokens, last 24 hours and in total."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.ui.main_window import MainWindow
from app.viewmodels.access import AccessViewModel, count, usage_cells
from app.viewmodels.fleet import FleetViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import ApiKeyInfo, RequestRecord

USED = ApiKeyInfo(id="k1", name="editor", prefix="sk-mirbad-ab12", created_at=1.7e9, last_used_at=None,
                  requests_24h=12, tokens_24h=3400, requests_total=1250, tokens_total=2_345_678)


@pytest.fixture
def editor(real_daemon: Any) -> Iterator[Callable[[int, int], None]]:
    """The real daemon with one key, "editor"; ``use(requests, tokens)`` serves that many more requests
    with it (in its access log for the last day, and in its totals). The key is revoked after the test."""
    key = real_daemon.call(lambda deps: deps.keys.create("editor")).info.id

    def use(requests: int, tokens: int) -> None:
        now = time.time()
        real_daemon.served(*(RequestRecord(id=f"r{now}-{n}", ts=now, model="alpha", node="local", path="/v1/chat/completions",
                                           status=200, prompt_tokens=tokens if n == 0 else 0, completion_tokens=0,
                                           key_id=key) for n in range(requests)))

        def count_use(deps: Any) -> None:
            for n in range(requests):
                deps.keys.count_use(key, tokens if n == 0 else 0)

        real_daemon.call(count_use)

    yield use
    real_daemon.call(lambda deps: deps.keys.revoke(key))


def _used_before_today(real_daemon: Any, use: Callable[[int, int], None]) -> None:
    """1250 requests and 2,345,678 tokens in all, 12 and 3400 of them in the last day."""
    real_daemon.call(lambda deps: [deps.keys.count_use(k.id, 2_345_678 - 3400 if n == 0 else 0)
                                   for k in deps.keys.list() for n in range(1250 - 12)])
    use(12, 3400)


def test_counts_read_at_a_glance() -> None:
    assert [count(n) for n in (0, 950, 1000, 12_345, 4_500_000, 2_000_000_000)] == \
        ["0", "950", "1k", "12.3k", "4.5M", "2G"]
    assert usage_cells(USED) == ("12 / 1.2k", "3.4k / 2.3M")


async def test_the_view_model_holds_each_keys_use(real_daemon: Any, editor: Callable[[int, int], None]) -> None:
    _used_before_today(real_daemon, editor)
    client = DaemonClient(*real_daemon, client_name="app")
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    access = AccessViewModel(fleet)
    await access.refresh()
    [info] = access.state.value.keys
    assert (info.requests_24h, info.tokens_24h, info.requests_total, info.tokens_total) == (12, 3400, 1250, 2_345_678)
    editor(1, 0)
    await access.refresh()  # what the page does each time it is shown
    assert usage_cells(access.state.value.keys[0])[0] == "13 / 1.3k"
    await client.close()


@pytest.mark.gui
def test_the_access_page_shows_requests_and_tokens_per_key(real_daemon: Any, editor: Callable[[int, int], None],
                                                           open_main_window: Callable[..., MainWindow],
                                                           qtbot: Any) -> None:
    _used_before_today(real_daemon, editor)
    window = open_main_window(DaemonClient(*real_daemon, client_name="app"))
    window.show_page("access")
    table = window.access.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]

    def row() -> list[str]:
        return [table.item(0, c).text() if table.item(0, c) else "" for c in range(table.columnCount())]

    qtbot.waitUntil(lambda: table.rowCount() == 1 and row()[headers.index("Requests")] == "12 / 1.2k")
    assert row()[headers.index("Tokens")] == "3.4k / 2.3M"
    window.show_page("overview")
    editor(28, 0)
    window.show_page("access")  # coming back reads the use again
    qtbot.waitUntil(lambda: row()[headers.index("Requests")] == "40 / 1.3k")
