"""Backup: back the daemon up now (with a passphrase, the CA and secrets go in encrypted), see the
daily backups, and restore from a file — a preview of every change first, applied on request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.widgets import (
    Card,
    ReadOnShow,
    button,
    fit_columns,
    label,
    line_edit,
    page,
    page_header,
    read_only_table,
)
from app.viewmodels.backup import (
    BackupState,
    BackupViewModel,
    fetchable,
    file_cells,
    row_cells,
)

PASSPHRASE_NOTE = ("With a passphrase the backup also holds this daemon's certificate authority and secrets, "
                   "encrypted, so a restore on a new machine keeps your nodes trusting it. Without one it holds "
                   "models, API keys (as hashes: the keys themselves are never stored), nodes and settings.")


def _ask_open(parent: QWidget) -> Path | None:
    name, _ = QFileDialog.getOpenFileName(parent, "Restore from a backup", "", "MirbadLLM backups (*.json)")
    return Path(name) if name else None


def _ask_save(parent: QWidget) -> Path | None:
    name, _ = QFileDialog.getSaveFileName(parent, "Save a backup", "mirbadllm-backup.json",
                                          "MirbadLLM backups (*.json)")
    return Path(name) if name else None


def _table(name: str, headers: list[str]) -> QTableWidget:
    table = read_only_table(name, headers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    fit_columns(table, len(headers) - 1)
    table.setMinimumHeight(160)
    return table


class BackupPage(ReadOnShow, QScrollArea):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = BackupViewModel(ctx.client)
        self.ask_open: Callable[[QWidget], Path | None] = _ask_open  # tests answer for the user
        self.ask_save: Callable[[QWidget], Path | None] = _ask_save
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Backup", "Everything this daemon knows, in one file; and back again."))
        layout.addWidget(self._create_card())
        layout.addWidget(self._list_card())
        layout.addWidget(self._restore_card(), 1)
        self.vm.state.subscribe(self.show_state, now=True)

    def _create_card(self) -> Card:
        card = Card("Back up now")
        card.body.addWidget(label(PASSPHRASE_NOTE, muted=True, wrap=True))
        form = QFormLayout()
        self.passphrase = line_edit("optional, at least 8 characters", name="BackupPassphrase", password=True)
        self.confirm = line_edit("the same again", name="BackupPassphraseConfirm", password=True)
        form.addRow("Passphrase", self.passphrase)
        form.addRow("Confirm", self.confirm)
        card.body.addLayout(form)
        row = QHBoxLayout()
        row.addStretch(1)
        self.save_file_button = button("Save to a file…", name="SaveBackupFile", on_click=self.save_to_file)
        self.backup_button = button("Back up now", kind="primary", name="BackUpNow", on_click=self.back_up_now)
        row.addWidget(self.save_file_button)
        row.addWidget(self.backup_button)
        card.body.addLayout(row)
        return card

    def _list_card(self) -> Card:
        card = Card("Daily backups")
        self.schedule_note = label("", muted=True, wrap=True)
        card.body.addWidget(self.schedule_note)
        self.files = _table("BackupFiles", ["Written", "Size", "Secrets", "File"])
        card.body.addWidget(self.files)
        return card

    def _restore_card(self) -> Card:
        card = Card("Restore")
        card.body.addWidget(label("Pick a backup file: you see what it would change here before anything "
                                  "changes. What this daemon has and the backup lacks is kept.", muted=True, wrap=True))
        row = QHBoxLayout()
        self.restore_passphrase = line_edit("the backup's passphrase, if it has one", name="RestorePassphrase",
                                            password=True)
        row.addWidget(self.restore_passphrase, 1)
        self.open_button = button("Choose a file…", name="ChooseBackup", on_click=self.choose_file)
        row.addWidget(self.open_button)
        card.body.addLayout(row)
        self.preview_note = label("", wrap=True)
        card.body.addWidget(self.preview_note)
        self.preview = _table("RestorePreview", ["Change", "Kind", "Item", "Fields"])
        card.body.addWidget(self.preview)
        actions = QHBoxLayout()
        self.downloads = QCheckBox("Download the missing model files")
        self.downloads.setObjectName("RestoreDownloads")
        self.downloads.setToolTip("Models whose definition names a Hugging Face file (or the demo package) are "
                                  "fetched onto their node after the restore; the others are copied by hand.")
        self.downloads.setChecked(True)
        self.downloads.toggled.connect(self.vm.set_downloads)
        actions.addWidget(self.downloads)
        actions.addStretch(1)
        self.cancel_button = button("Cancel", name="CancelRestore", on_click=self.vm.cancel)
        self.apply_button = button("Restore", kind="primary", name="ApplyRestore", on_click=self.apply)
        actions.addWidget(self.cancel_button)
        actions.addWidget(self.apply_button)
        card.body.addLayout(actions)
        return card

    # --- actions -----------------------------------------------------------------------------------
    def _passphrase(self) -> str | None:
        """The passphrase typed twice alike, or None after saying what is wrong."""
        first, second = self.passphrase.text(), self.confirm.text()
        if first != second:
            self.ctx.act(_refuse("The two passphrases differ."))
            return None
        return first

    def _clear_passphrase(self) -> None:
        self.passphrase.clear()
        self.confirm.clear()

    def back_up_now(self) -> None:
        passphrase = self._passphrase()
        if passphrase is not None:
            self.ctx.act(self.vm.back_up_now(passphrase), "Backup written")
            self._clear_passphrase()

    def save_to_file(self) -> None:
        passphrase = self._passphrase()
        if passphrase is None:
            return
        path = self.ask_save(self)
        if path is not None:
            self.ctx.act(self.vm.save_to_file(path, passphrase), f"Backup saved to {path.name}")
            self._clear_passphrase()

    def choose_file(self) -> None:
        path = self.ask_open(self)
        if path is not None:
            self.ctx.act(self.vm.preview_file(path, self.restore_passphrase.text()))
            self.restore_passphrase.clear()

    def apply(self) -> None:
        self.ctx.act(self.vm.apply(self.downloads.isChecked()))

    # --- rendering ---------------------------------------------------------------------------------
    def show_state(self, s: BackupState) -> None:
        busy = s.busy is not None
        for widget in (self.backup_button, self.save_file_button, self.open_button):
            widget.setEnabled(not busy)
        if s.listing is not None:
            state = "on" if s.listing.enabled else "off"
            self.schedule_note.setText(f"Daily backups are {state}, into {s.listing.directory}, keeping the newest "
                                       f"{s.listing.keep}." + (f"\n⚠ The last one failed: {s.listing.last_error}"
                                                               if s.listing.last_error else ""))
            self.files.setRowCount(len(s.listing.files))
            for row, f in enumerate(s.listing.files):
                cells = (fmt.when(f.created_at), fmt.size(f.size), "Encrypted" if f.encrypted else "None", f.name)
                for col, text in enumerate(cells):
                    self.files.setItem(row, col, QTableWidgetItem(text))
        self._render_restore(s)

    def _render_restore(self, s: BackupState) -> None:
        rows = [row_cells(r) for r in s.preview.rows] if s.preview is not None else []
        missing = s.preview.missing_files if s.preview is not None else s.result.missing_files if s.result else []
        fetch = s.downloads if s.preview is not None else s.fetched
        rows += [file_cells(m, s.node_names, fetch) for m in missing]
        self.preview.setRowCount(len(rows))
        for n, cells in enumerate(rows):
            for col, text in enumerate(cells):
                self.preview.setItem(n, col, QTableWidgetItem(text))
        self.apply_button.setEnabled(s.can_apply)
        self.downloads.setEnabled(s.preview is not None and any(fetchable(m) for m in s.preview.missing_files))
        self.cancel_button.setEnabled(s.preview is not None)
        if s.busy:
            text = s.busy
        elif s.error:
            text = f"⚠ {s.error}"
        elif s.result is not None:
            text = f"Restored {s.result.applied} change(s)."
            text += "".join(f"\nRefused: {f}" for f in s.result.failed)
            if s.result.transfers:
                text += f"\nDownloading {len(s.result.transfers)} model file(s): the Models page shows their progress."
            hand = [m for m in s.result.missing_files if m.state == "missing" and m.fetch == "by_hand"]
            if hand:
                text += f"\n{len(hand)} model file(s) to copy by hand: listed above."
            if s.result.restart_required:
                text += "\nRestart the daemon for the certificate authority and nodes to take effect."
        elif s.preview is not None:
            p = s.preview
            text = f"{s.restore_file}: a backup of {p.host or 'a daemon'} from {fmt.when(p.created_at)}" + (
                ", with encrypted secrets." if p.encrypted else ", without secrets.")
            if not s.can_apply:
                text += (" Nothing to restore unless the missing model files are downloaded."
                         if any(fetchable(m) for m in p.missing_files) else " This daemon already holds all of it.")
        else:
            text = ""
        self.preview_note.setText(text)


async def _refuse(message: str) -> None:
    raise ValueError(message)
