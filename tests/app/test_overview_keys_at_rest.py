"""The Overview says when the daemon's private keys are plain 0600 files (no OS keychain), and
says nothing when they are in the keychain."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtWidgets import QLabel, QPushButton

from app.preferences import load_preferences
from app.ui.main_window import MainWindow
from daemon.api.contracts import KeysAtRest

pytestmark = pytest.mark.gui

WARNING = ("Private keys (ca.key, daemon-client.key) are stored unencrypted, as files readable only by this "
           "user (0600): no OS keychain is available (keyring backend keyring.backends.fail.Keyring).")


def test_the_overview_warns_when_keys_are_plain_files(open_main_window: Callable[..., MainWindow],
                                                      qtbot: Any) -> None:
    fake = FakeDaemonClient([])
    fake.keys_at_rest = KeysAtRest(keychain=False, plain_files=["ca.key", "daemon-client.key"], warning=WARNING)
    win = open_main_window(fake)
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    qtbot.waitUntil(lambda: shown.isVisible())
    assert "0600" in shown.text() and "no OS keychain" in shown.text() and "ca.key" in shown.text()


def test_a_dismissed_warning_stays_away_until_it_changes(open_main_window: Callable[..., MainWindow],
                                                         qtbot: Any, tmp_path: Any) -> None:
    fake = FakeDaemonClient([])
    fake.keys_at_rest = KeysAtRest(keychain=False, plain_files=["ca.key", "daemon-client.key"], warning=WARNING)
    win = open_main_window(fake)
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    dismiss = win.overview.findChild(QPushButton, "KeysAtRestDismiss")
    qtbot.waitUntil(lambda: shown.isVisible() and dismiss.isVisible())
    dismiss.click()
    assert not shown.isVisible() and not dismiss.isVisible()
    assert load_preferences(tmp_path / "app.json").dismissed_keys_warning == WARNING  # kept across restarts
    fake.keys_at_rest = KeysAtRest(keychain=False, plain_files=["ca.key"], warning=WARNING.replace(
        "ca.key, daemon-client.key", "ca.key"))
    refreshed = asyncio.ensure_future(win.ctx.fleet.resync())  # the next status the app reads
    qtbot.waitUntil(lambda: shown.isVisible())  # another warning is said again
    assert "(ca.key)" in shown.text() and refreshed.done()


def test_the_overview_says_nothing_when_keys_are_in_the_keychain(open_main_window: Callable[..., MainWindow],
                                                                 qtbot: Any) -> None:
    fake = FakeDaemonClient([])
    fake.keys_at_rest = KeysAtRest(keychain=True, backend="keyring.backends.macOS.Keyring")
    win = open_main_window(fake)
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    assert not shown.isVisible() and shown.text() == ""
