"""The Access page shows each API key's use: requests and tokens, last 24 hours and in total."""

from __future__ import annotations

from typing import Any

import pytest
from fake_daemon import FakeDaemonClient

from app.ui.main_window import MainWindow
from app.viewmodels.access import AccessViewModel, count, usage_cells
from app.viewmodels.fleet import FleetViewModel
from daemon.api.models import ApiKeyInfo

USED = ApiKeyInfo(id="k1", name="editor", prefix="sk-mirbad-ab12", created_at=1.7e9, last_used_at=None,
                  requests_24h=12, tokens_24h=3400, requests_total=1250, tokens_total=2_345_678)


def test_counts_read_at_a_glance() -> None:
    assert [count(n) for n in (0, 950, 1000, 12_345, 4_500_000, 2_000_000_000)] == \
        ["0", "950", "1k", "12.3k", "4.5M", "2G"]
    assert usage_cells(USED) == ("12 / 1.2k", "3.4k / 2.3M")


async def test_the_view_model_holds_each_keys_use(fake: FakeDaemonClient) -> None:
    fake.keys["k1"] = USED
    fleet = FleetViewModel(fake, host_refresh_s=3600)
    await fleet.resync()
    access = AccessViewModel(fleet)
    await access.refresh()
    [info] = access.state.value.keys
    assert (info.requests_24h, info.tokens_24h, info.requests_total, info.tokens_total) == (12, 3400, 1250, 2_345_678)
    fake.keys["k1"] = USED.model_copy(update={"requests_24h": 13, "requests_total": 1251})
    await access.refresh()  # what the page does each time it is shown
    assert usage_cells(access.state.value.keys[0])[0] == "13 / 1.3k"


@pytest.mark.gui
def test_the_access_page_shows_requests_and_tokens_per_key(window: MainWindow, fake: FakeDaemonClient,
                                                           qtbot: Any) -> None:
    fake.keys["k1"] = USED
    window.show_page("access")
    table = window.access.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]

    def row() -> list[str]:
        return [table.item(0, c).text() if table.item(0, c) else "" for c in range(table.columnCount())]

    qtbot.waitUntil(lambda: table.rowCount() == 1 and row()[headers.index("Requests")] == "12 / 1.2k")
    assert row()[headers.index("Tokens")] == "3.4k / 2.3M"
    window.show_page("overview")
    fake.keys["k1"] = USED.model_copy(update={"requests_24h": 40, "requests_total": 1278})
    window.show_page("access")  # coming back reads the use again
    qtbot.waitUntil(lambda: row()[headers.index("Requests")] == "40 / 1.3k")
