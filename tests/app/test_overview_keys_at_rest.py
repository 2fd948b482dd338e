"""The Overview says when the daemon's private keys are plain 0600 files (no OS keychain), and
says nothing when they are in the keychain."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication, QLabel

from app.context import AppContext
from app.ui import theme
from app.ui.main_window import MainWindow
from daemon.api.contracts import KeysAtRest

pytestmark = pytest.mark.gui

WARNING = ("Private keys (ca.key, daemon-client.key) are stored unencrypted, as files readable only by this "
           "user (0600): no OS keychain is available (keyring backend keyring.backends.fail.Keyring).")


def _window(fake: FakeDaemonClient, qapp: QApplication, qtbot: Any, tmp_path: Path) -> MainWindow:
    theme.apply(qapp, "light")
    ctx = AppContext.create(fake, tmp_path, prefs_path=tmp_path / "app.json", platform="linux", host_refresh_s=3600)
    ctx.start()
    qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.loaded)
    win = MainWindow(ctx, apply_theme=lambda mode: theme.apply(qapp, mode))
    win.show()
    return win


@pytest.fixture
def opened(qloop: asyncio.AbstractEventLoop, qapp: QApplication, qtbot: Any,
           tmp_path: Path) -> Iterator[Any]:
    windows: list[MainWindow] = []

    def open_with(fake: FakeDaemonClient) -> MainWindow:
        windows.append(_window(fake, qapp, qtbot, tmp_path))
        return windows[-1]

    yield open_with
    for win in windows:
        win.ctx.logs.stop()
        win.ctx.first_run.close()
        win.quitting = True
        win.close()
        win.deleteLater()
    qapp.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def test_the_overview_warns_when_keys_are_plain_files(opened: Any, qtbot: Any) -> None:
    fake = FakeDaemonClient([])
    fake.keys_at_rest = KeysAtRest(keychain=False, plain_files=["ca.key", "daemon-client.key"], warning=WARNING)
    win = opened(fake)
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    qtbot.waitUntil(lambda: shown.isVisible())
    assert "0600" in shown.text() and "no OS keychain" in shown.text() and "ca.key" in shown.text()


def test_the_overview_says_nothing_when_keys_are_in_the_keychain(opened: Any, qtbot: Any) -> None:
    fake = FakeDaemonClient([])
    fake.keys_at_rest = KeysAtRest(keychain=True, backend="keyring.backends.macOS.Keyring")
    win = opened(fake)
    shown = win.overview.findChild(QLabel, "KeysAtRestWarning")
    assert not shown.isVisible() and shown.text() == ""
