"""The Settings page's updates, offscreen, over a fake checker and a fake installer (the daemon is the real one)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from app.context import AppContext
from app.ui.pages.settings import SettingsPage
from app.updates import (
    StagedUpdate,
    UpdateError,
    UpdateReady,
    UpdateResult,
    UpToDate,
)
from app.viewmodels.updates import UPDATES_OFF, UpdatesViewModel
from daemon.api.client import DaemonClient

pytestmark = pytest.mark.gui

FEED = "https://updates.example.org/mirbadllm/stable/feed.json"


class FakeChecker:
    """Answers what the test tells it to; records which feed it was built for."""

    def __init__(self) -> None:
        self.answer: UpdateResult | UpdateError = UpToDate("0.1.0", "0.1.0")
        self.feeds: list[str] = []
        self.gate: asyncio.Event | None = None

    def __call__(self, feed_url: str) -> FakeChecker:
        self.feeds.append(feed_url)
        return self

    async def check(self) -> UpdateResult:
        if self.gate is not None:
            await self.gate.wait()
        if isinstance(self.answer, UpdateError):
            raise self.answer
        return self.answer


class FakeInstaller:
    platform = "linux-x86_64-appimage"
    unsupported: str | None = None

    def __init__(self) -> None:
        self.applied: list[StagedUpdate] = []

    def apply(self, staged: StagedUpdate) -> Path:
        self.applied.append(staged)
        return Path("/opt/MirbadLLM.AppImage")

    def restart_command(self, program: Path, pid: int) -> list[str]:
        return [str(program), "--after", str(pid)]


def staged(tmp_path: Path) -> StagedUpdate:
    return StagedUpdate("0.2.0", "linux-x86_64-appimage", tmp_path / "MirbadLLM-0.2.0.AppImage", 3,
                        hashlib.sha256(b"new").hexdigest())


@pytest.fixture
def checker() -> FakeChecker:
    return FakeChecker()


@pytest.fixture
def installer() -> FakeInstaller:
    return FakeInstaller()


@pytest.fixture
def client(real_daemon: Any, qloop: asyncio.AbstractEventLoop, qtbot: Any) -> Iterator[DaemonClient]:
    """The app's client of the real daemon (the app's own updates ask nothing of it); closed after."""
    client = DaemonClient(*real_daemon, client_name="app")
    yield client
    closing = asyncio.ensure_future(client.close())
    qtbot.waitUntil(closing.done, timeout=10_000)


@pytest.fixture
def page(client: DaemonClient, qloop: asyncio.AbstractEventLoop, qapp: QApplication, tmp_path: Path,
         checker: FakeChecker, installer: FakeInstaller) -> Iterator[SettingsPage]:
    ctx = AppContext.create(client, tmp_path, prefs_path=tmp_path / "app.json", platform="linux", host_refresh_s=3600)
    ctx.settings.updates = UpdatesViewModel("", tmp_path / "updates", installer=installer,  # type: ignore[arg-type]
                                            checker_factory=checker)
    widget = SettingsPage(ctx, apply_theme=lambda _mode: None)
    widget.launched: list[list[str]] = []  # type: ignore[misc]
    widget.launch_and_quit = lambda command: widget.launched.append(command) is None  # type: ignore[attr-defined]
    widget.show()
    yield widget
    widget.close()
    widget.deleteLater()
    qapp.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def set_feed(page: SettingsPage, url: str) -> None:
    page.feed_url.setText(url)
    page.apply_feed.click()


def test_updates_are_off_until_a_feed_is_set(page: SettingsPage, checker: FakeChecker, tmp_path: Path) -> None:
    assert page.update_line.text() == UPDATES_OFF == "Updates are off: no release feed URL is set."
    assert not page.check_updates.isEnabled() and page.restart_update.isHidden()
    set_feed(page, FEED)
    assert page.check_updates.isEnabled() and page.update_line.isHidden()
    assert json.loads((tmp_path / "app.json").read_text())["update_feed_url"] == FEED
    set_feed(page, "")
    assert not page.check_updates.isEnabled() and page.update_line.text() == UPDATES_OFF


def test_a_feed_url_that_is_not_http_is_refused(page: SettingsPage, tmp_path: Path) -> None:
    set_feed(page, "file:///etc/passwd")
    assert page.update_line.text() == "Use the feed's address, like https://example.org/mirbadllm/stable/feed.json"
    assert not page.check_updates.isEnabled()


def test_check_says_you_have_the_latest_version(page: SettingsPage, checker: FakeChecker, qtbot: Any) -> None:
    set_feed(page, FEED)
    page.check_updates.click()
    qtbot.waitUntil(lambda: page.update_line.text() == "You have the latest version")
    assert checker.feeds == [FEED] and page.restart_update.isHidden()


def test_a_staged_update_offers_restart_which_installs_and_relaunches(
        page: SettingsPage, checker: FakeChecker, installer: FakeInstaller, qtbot: Any, tmp_path: Path) -> None:
    checker.answer = UpdateReady(staged(tmp_path))
    checker.gate = asyncio.Event()
    set_feed(page, FEED)
    page.check_updates.click()
    qtbot.waitUntil(lambda: page.update_line.text() == "Checking for updates…")
    assert not page.check_updates.isEnabled()  # one check at a time
    checker.gate.set()
    qtbot.waitUntil(lambda: page.update_line.text() == "MirbadLLM 0.2.0 is ready — Restart to update")
    assert page.restart_update.isVisible() and page.check_updates.isEnabled()
    page.restart_update.click()
    qtbot.waitUntil(lambda: page.launched != [])  # type: ignore[attr-defined]
    assert installer.applied == [staged(tmp_path)]
    assert page.launched[0][:2] == ["/opt/MirbadLLM.AppImage", "--after"]  # type: ignore[attr-defined]


def test_a_refusal_is_shown_as_an_error_with_no_restart(page: SettingsPage, checker: FakeChecker,
                                                        installer: FakeInstaller, qtbot: Any) -> None:
    message = "Signature check failed: the feed is not signed by a trusted MirbadLLM release key; the update was not used"
    checker.answer = UpdateError("signature", message)
    set_feed(page, FEED)
    page.check_updates.click()
    qtbot.waitUntil(lambda: page.update_line.text() == message)
    assert page.update_line.property("role") == "error" and page.restart_update.isHidden()
    assert installer.applied == []


def test_the_default_feed_is_the_projects_releases_checked_daily() -> None:
    from app.preferences import AppPreferences
    from core.releases.feed import DEFAULT_FEED_URL

    prefs = AppPreferences()
    assert prefs.update_feed_url == DEFAULT_FEED_URL and prefs.check_updates_daily
    assert DEFAULT_FEED_URL.startswith("https://") and DEFAULT_FEED_URL.endswith("/feed.json")


async def test_the_daily_check_runs_a_minute_after_start_then_each_day_and_stops_once_staged(
        checker: FakeChecker, installer: FakeInstaller, tmp_path: Path) -> None:
    vm = UpdatesViewModel(FEED, tmp_path / "updates", installer=installer,  # type: ignore[arg-type]
                          checker_factory=checker)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            checker.answer = UpdateReady(staged(tmp_path))  # a release comes out on day two
        if len(waits) == 4:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await vm.check_daily(sleep=sleep)
    assert waits == [60.0, 86_400.0, 86_400.0, 86_400.0]
    assert checker.feeds == [FEED, FEED]  # day three: staged already, nothing fetched again
    assert vm.state.value.ready is not None and vm.state.value.ready.version == "0.2.0"


def test_the_tray_tells_once_of_an_update_a_check_staged(client: DaemonClient, qloop: asyncio.AbstractEventLoop,
                                                         qapp: QApplication, tmp_path: Path, checker: FakeChecker,
                                                         installer: FakeInstaller, qtbot: Any) -> None:
    from app.ui.tray import TrayController

    ctx = AppContext.create(client, tmp_path, prefs_path=tmp_path / "app.json", platform="linux", host_refresh_s=3600)
    ctx.settings.updates = UpdatesViewModel(FEED, tmp_path / "updates", installer=installer,  # type: ignore[arg-type]
                                            checker_factory=checker)
    tray = TrayController(ctx, open_window=lambda: None, quit_app=lambda: None, stop_all_and_quit=lambda: None)
    try:
        checker.answer = UpdateReady(staged(tmp_path))
        for _ in range(2):  # a second check of the same release says nothing more
            task = asyncio.ensure_future(ctx.settings.updates.check())
            qtbot.waitUntil(task.done)
        assert [(n.title, n.failed) for n in tray.notified] == [("MirbadLLM 0.2.0 is ready", False)]
        assert "Restart to update" in tray.notified[0].message
    finally:
        tray.close()


def test_the_daily_check_is_one_setting_that_is_kept(page: SettingsPage, client: DaemonClient,
                                                     tmp_path: Path) -> None:
    assert page.daily_updates.isChecked()  # on by default
    page.daily_updates.click()
    assert json.loads((tmp_path / "app.json").read_text())["check_updates_daily"] is False
    again = AppContext.create(client, tmp_path, prefs_path=tmp_path / "app.json", platform="linux")
    assert again.start_update_checks() is None  # off: the next start begins no daily check
