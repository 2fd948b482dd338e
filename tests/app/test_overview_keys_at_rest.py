"""The Overview says when the daemon's private keys are plain 0600 files (no OS keychain), and
says nothing when they are in the keychain."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel, QPushButton
from real_daemon import daemon_in_thread

from app.preferences import load_preferences
from app.ui.main_window import MainWindow
from daemon.api.client import DaemonClient
from daemon.tls import CLIENT_STEM

pytestmark = pytest.mark.gui


@pytest.fixture
def no_keychain(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine runs no keychain (keyring's "fail" backend), as on a headless Linux box."""
    import keyring
    from keyring.backends import fail

    previous = keyring.get_keyring()
    monkeypatch.setenv("MIRBADLLM_KEYRING", "os")
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(previous)


def test_the_overview_warns_when_keys_are_plain_files(real_daemon: Any, no_keychain: None,
                                                      open_main_window: Callable[..., MainWindow],
                                                      qtbot: Any) -> None:
    win = open_main_window(DaemonClient(*real_daemon, client_name="app"))
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    qtbot.waitUntil(lambda: shown.isVisible())
    assert "0600" in shown.text() and "runs no keychain" in shown.text() and "ca.key" in shown.text()


def test_a_dismissed_warning_stays_away_until_it_changes(real_daemon: Any, no_keychain: None,
                                                         open_main_window: Callable[..., MainWindow],
                                                         qtbot: Any, tmp_path: Any) -> None:
    win = open_main_window(DaemonClient(*real_daemon, client_name="app"))
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    dismiss = win.overview.findChild(QPushButton, "KeysAtRestDismiss")
    qtbot.waitUntil(lambda: shown.isVisible() and dismiss.isVisible())
    warning = win.ctx.fleet.snapshot.value.keys_warning or ""  # as the daemon said it
    assert "(ca.key, daemon-client.key)" in warning and warning in shown.text()
    dismiss.click()
    assert not shown.isVisible() and not dismiss.isVisible()
    assert load_preferences(tmp_path / "app.json").dismissed_keys_warning == warning  # kept across restarts
    (real_daemon.deps.paths.pki / f"{CLIENT_STEM}.key").unlink()  # one key fewer at rest: another warning
    refreshed = asyncio.ensure_future(win.ctx.fleet.resync())  # the next status the app reads
    qtbot.waitUntil(lambda: shown.isVisible())  # another warning is said again
    assert "(ca.key)" in shown.text() and refreshed.done()


def test_the_overview_says_nothing_when_keys_are_in_the_keychain(keychain: Any, tmp_path: Path,
                                                                 open_main_window: Callable[..., MainWindow],
                                                                 qtbot: Any) -> None:
    with daemon_in_thread(tmp_path / "home") as found:  # its keys written encrypted, with the keychain's secret
        win = open_main_window(DaemonClient(*found, client_name="app"))
        shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
        status = asyncio.ensure_future(win.ctx.client.status())
        qtbot.waitUntil(status.done, timeout=10_000)
        at_rest = status.result().keys_at_rest
        assert at_rest is not None and at_rest.keychain and not at_rest.plain_files
        assert not shown.isVisible() and shown.text() == ""
        closing = asyncio.ensure_future(win.ctx.close())
        qtbot.waitUntil(closing.done, timeout=10_000)
