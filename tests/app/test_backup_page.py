"""The Backup page against the in-memory daemon: back up with a passphrase, see it in the list,
restore from a file — the preview table first, nothing changed until Restore, then applied."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from PySide6.QtWidgets import QApplication

from app.context import AppContext
from app.ui import theme
from app.ui.main_window import PAGES, MainWindow
from app.ui.pages.backup import BackupPage
from app.viewmodels.backup import BackupViewModel


@pytest.fixture
def window(fake: FakeDaemonClient, qloop: asyncio.AbstractEventLoop, qapp: QApplication, qtbot: Any,
           tmp_path: Path) -> Iterator[MainWindow]:
    theme.apply(qapp, "light")
    ctx = AppContext.create(fake, tmp_path, prefs_path=tmp_path / "app.json", platform="linux", host_refresh_s=3600)
    ctx.fleet.feed._poll_timeout = 5
    ctx.start()
    qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.loaded)
    win = MainWindow(ctx, apply_theme=lambda mode: theme.apply(qapp, mode))
    win.show()
    yield win
    win.quitting = True
    win.close()
    ctx.logs.stop()


def _cells(table: Any) -> list[list[str]]:
    return [[table.item(r, c).text() if table.item(r, c) else "" for c in range(table.columnCount())]
            for r in range(table.rowCount())]


def test_backup_is_a_page_with_its_icon() -> None:
    assert ("backup", "Backup") in PAGES
    assert (Path(__file__).resolve().parents[2] / "resources" / "icons" / "nav-backup.svg").exists()


def test_backing_up_lists_the_file_and_a_restore_previews_before_it_applies(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any, tmp_path: Path) -> None:
    window.show_page("backup")
    page: BackupPage = window.backup
    qtbot.waitUntil(lambda: page.vm.state.value.listing is not None)
    assert page.files.rowCount() == 0

    page.passphrase.setText("a good passphrase")
    page.confirm.setText("a good passphrase")
    page.backup_button.click()
    qtbot.waitUntil(lambda: page.files.rowCount() == 1)
    assert _cells(page.files)[0][2] == "Encrypted"
    assert page.passphrase.text() == "" and page.confirm.text() == ""  # not left in the field

    target = tmp_path / "exported.json"
    page.passphrase.setText("a good passphrase")
    page.confirm.setText("a good passphrase")
    page.ask_save = lambda _parent: target
    page.save_file_button.click()
    qtbot.waitUntil(target.exists)
    assert target.stat().st_mode & 0o777 == 0o600

    # The user removes a model and edits another; the backup brings both back, after a preview.
    del fake.definitions["beta"]
    fake.definitions["alpha"] = definition("alpha", tags=["edited"])
    page.ask_open = lambda _parent: target
    page.restore_passphrase.setText("a good passphrase")
    page.open_button.click()
    qtbot.waitUntil(lambda: page.preview.rowCount() > 0)
    rows = {(r[1], r[2]): r for r in _cells(page.preview)}
    assert rows[("Model", "alpha")][0] == "Changed" and rows[("Model", "alpha")][3] == "tags"
    assert rows[("Model", "Beta-7B")][0] == "New"
    assert "with encrypted secrets" in page.preview_note.text()
    assert "beta" not in fake.definitions and page.apply_button.isEnabled()  # the preview changed nothing

    page.apply_button.click()
    qtbot.waitUntil(lambda: page.vm.state.value.result is not None)
    assert "beta" in fake.definitions and fake.definitions["alpha"].tags == ["chat"]
    assert page.preview.rowCount() == 0 and "Restored 2 change(s)." in page.preview_note.text()


def test_a_wrong_passphrase_says_so_and_restores_nothing(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any, tmp_path: Path) -> None:
    target = tmp_path / "b.json"
    vm = BackupViewModel(fake)
    saved = asyncio.ensure_future(vm.save_to_file(target, "the right passphrase"))
    qtbot.waitUntil(saved.done)
    del fake.definitions["beta"]
    window.show_page("backup")
    page: BackupPage = window.backup
    page.ask_open = lambda _parent: target
    page.restore_passphrase.setText("the wrong passphrase")
    page.open_button.click()
    qtbot.waitUntil(lambda: page.vm.state.value.error is not None)
    assert "passphrase does not open" in page.preview_note.text()
    assert page.preview.rowCount() == 0 and not page.apply_button.isEnabled()
    assert "beta" not in fake.definitions and not fake.called("restore_backup")
