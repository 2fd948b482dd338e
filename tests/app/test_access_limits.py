"""The Access page shows each key's limits with its use against them, and sets them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication, QPushButton

from app.ui.main_window import MainWindow
from app.ui.pages.access import KeyLimitsDialog
from app.viewmodels.access import AccessViewModel, limits_cell
from app.viewmodels.fleet import FleetViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import ApiKeyInfo, ApiKeyLimits

CAPPED = ApiKeyInfo(id="k1", name="editor", prefix="sk-mirbad-ab12", created_at=1.7e9,
                    limits=ApiKeyLimits(requests_per_minute=60, tokens_per_day=100_000),
                    requests_last_minute=2, tokens_today=3400)


@pytest.fixture
def capped(real_daemon: Any) -> Iterator[str]:
    """The real daemon with one key, "editor", as CAPPED: 2 requests this minute, 3400 tokens today.
    Its id; it is revoked after the test."""

    def create(deps: Any) -> str:
        key = deps.keys.create("editor", CAPPED.limits).info.id
        for tokens in (1400, 2000):
            deps.keys.admit(key)
            deps.keys.count_use(key, tokens)
        return key

    key = real_daemon.call(create)
    yield key
    real_daemon.call(lambda deps: deps.keys.revoke(key))


def _limits(real_daemon: Any, key: str) -> ApiKeyLimits:
    return next(k.limits for k in real_daemon.call(lambda deps: deps.keys.list()) if k.id == key)


def test_a_keys_limits_read_with_its_use_against_them() -> None:
    assert limits_cell(CAPPED) == "2 / 60 a min · 3.4k / 100k today"
    assert limits_cell(CAPPED.model_copy(update={"limits": ApiKeyLimits(tokens_per_day=5000)})) == \
        "3.4k / 5k today"
    assert limits_cell(CAPPED.model_copy(update={"limits": ApiKeyLimits()})) == "No limits"


async def test_the_view_model_sets_both_limits(real_daemon: Any, capped: str) -> None:
    client = DaemonClient(*real_daemon, client_name="app")
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    access = AccessViewModel(fleet)
    await access.refresh()
    info = await access.set_limits(capped, 30, None)
    assert info.limits == ApiKeyLimits(requests_per_minute=30)
    assert access.state.value.keys[0].limits == ApiKeyLimits(requests_per_minute=30)
    assert _limits(real_daemon, capped) == ApiKeyLimits(requests_per_minute=30)  # set on the daemon
    await client.close()


@pytest.mark.gui
def test_the_access_page_shows_and_sets_a_keys_limits(real_daemon: Any, capped: str,
                                                      open_main_window: Callable[..., MainWindow],
                                                      qtbot: Any) -> None:
    window = open_main_window(DaemonClient(*real_daemon, client_name="app"))
    window.show_page("access")
    page = window.access
    table = page.table
    limits_col = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())].index("Limits")

    def shown() -> str:  # the limits are shown on the button that sets them
        cell = table.cellWidget(0, limits_col) if table.rowCount() else None
        return cell.text() if isinstance(cell, QPushButton) else ""

    qtbot.waitUntil(lambda: shown() == "2 / 60 a min · 3.4k / 100k today")
    asked: list[ApiKeyInfo] = []

    def answer(_parent: object, info: ApiKeyInfo) -> tuple[int | None, int | None]:
        asked.append(info)
        return (None, 250_000)

    page.ask_limits = answer
    page.findChild(QPushButton, f"limits-{capped}").click()
    qtbot.waitUntil(lambda: shown() == "3.4k / 250k today")
    assert asked[0].limits == CAPPED.limits  # the dialog starts from the key's limits
    assert _limits(real_daemon, capped) == ApiKeyLimits(tokens_per_day=250_000)


@pytest.mark.gui
def test_the_limits_dialog_starts_from_the_limits_and_zero_is_none(qapp: QApplication, qtbot: Any) -> None:
    dialog = KeyLimitsDialog(CAPPED)
    qtbot.addWidget(dialog)
    assert dialog.limits() == (60, 100_000)
    dialog.rpm.setValue(0)
    assert dialog.rpm.text() == "No limit"
    dialog.tokens.setValue(7)
    assert dialog.limits() == (None, 7)
