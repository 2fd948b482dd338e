"""The Backup page's view-model: back up now (into the daemon's backup directory, or into a file
here), the daily backups' list, and a restore from a file, previewed first and applied on request.

The preview also lists the models whose file is not on their node; the restore downloads those
that can be fetched when asked (the page's checkbox, on by default).

A passphrase is handed to the daemon and not kept: for a restore, only between its preview and its
apply (or cancel), in this object, never in the state the page renders.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from app import format as fmt
from app.viewmodels.observable import Observable
from core.json_store import write_atomic
from daemon.api.backup import (
    BackupFile,
    BackupListing,
    MissingFile,
    PreviewRow,
    RestorePreview,
    RestoreResult,
)
from daemon.api.client import DaemonError
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")

CHANGE_LABELS = {"new": "New", "changed": "Changed", "identical": "Same", "skipped": "Skipped"}
KIND_LABELS = {"model": "Model", "key": "API key", "node": "Node", "settings": "Settings",
               "ca": "Certificate authority", "secret": "Secret"}


def row_cells(row: PreviewRow) -> tuple[str, str, str, str]:
    """What the preview table shows of a row: change, kind, item, and the fields or the note."""
    detail = ", ".join(row.fields)
    if row.note:
        detail = f"{detail} — {row.note}" if detail else row.note
    return CHANGE_LABELS.get(row.change, row.change), KIND_LABELS.get(row.kind, row.kind), row.label, detail


FETCH_LABELS = {"huggingface": "Download from Hugging Face", "package": "Assemble from the demo package",
                "by_hand": "Copy by hand"}


def fetchable(item: MissingFile) -> bool:
    return item.state == "missing" and item.fetch != "by_hand"


def file_cells(item: MissingFile, node_names: Mapping[str, str] | None = None,
               downloads: bool = True) -> tuple[str, str, str, str]:
    """What the preview table shows of a model file not on its node: what the restore does about it
    (with ``downloads``: the box ticked), its node by name (``node_names``: id -> name), in the item and
    in the daemon's note alike. A file its node could not be asked about is left as it is, and says so."""
    node = (node_names or {}).get(item.node) or item.node
    note = item.note.replace(item.node, node)
    where = f"{item.model_id} on {node}: {item.path}"
    if item.state != "missing":
        return "Not checked", "Model file", where, f"Left as it is: its node could not be asked — {note}"
    size = f" ({fmt.size(item.size)})" if item.size else ""
    if fetchable(item) and not downloads:
        return ("Missing", "Model file", where, (f"Not downloaded{size}: downloading is unticked — copy the file "
                f"to {node}:{item.path} by hand, or tick it"))
    how = FETCH_LABELS.get(item.fetch, item.fetch) + size
    if item.transfer:
        how += f", transfer {item.transfer}"
    return "Missing", "Model file", where, f"{how} — {note}" if note else how


@dataclass(frozen=True)
class BackupState:
    listing: BackupListing | None = None
    preview: RestorePreview | None = None
    restore_file: str = ""
    result: RestoreResult | None = None
    busy: str | None = None
    error: str | None = None
    node_names: Mapping[str, str] = field(default_factory=dict)  # node id -> name, for the model files' rows
    downloads: bool = True  # the preview's box: the restore fetches the missing model files that can be
    fetched: bool = True  # the restore done (``result``) was asked to fetch them

    @property
    def can_apply(self) -> bool:
        """A restore would change something: a row new or changed, or (downloads on) a file to fetch."""
        return self.preview is not None and self.busy is None and (
            any(r.change in ("new", "changed") for r in self.preview.rows)
            or (self.downloads and any(fetchable(m) for m in self.preview.missing_files)))


class BackupViewModel:
    def __init__(self, client: DaemonApi) -> None:
        self.client = client
        self.state: Observable[BackupState] = Observable(BackupState())
        self._pending: tuple[str, str | None] | None = None  # the previewed text and its passphrase

    def _set(self, **changes: Any) -> None:
        self.state.set(replace(self.state.value, **changes))

    async def _busy(self, what: str, action: Awaitable[T]) -> T:
        self._set(busy=what, error=None)
        try:
            return await action
        except DaemonError as exc:
            self._set(error=exc.message)
            raise
        finally:
            self._set(busy=None)

    async def refresh(self) -> None:
        try:
            self._set(listing=await self.client.list_backups(), error=None)
        except DaemonError as exc:
            self._set(error=exc.message)

    async def back_up_now(self, passphrase: str = "") -> BackupFile:
        """A backup into the daemon's backup directory."""
        saved = await self._busy("Backing up…", self.client.save_backup(passphrase or None))
        await self.refresh()
        return saved

    async def save_to_file(self, path: Path, passphrase: str = "") -> Path:
        """A backup written to ``path`` on this machine (0600)."""
        text = await self._busy("Backing up…", self.client.create_backup(passphrase or None))
        await asyncio.get_running_loop().run_in_executor(None, write_atomic, path, text.encode("utf-8"), 0o600)
        return path

    async def preview_file(self, path: Path, passphrase: str = "") -> RestorePreview:
        """Read a backup file and ask the daemon what restoring it would change (nothing changes)."""
        try:
            text = await asyncio.get_running_loop().run_in_executor(None, path.read_text, "utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self._set(error=f"Cannot read {path.name}: {exc}")
            raise ValueError(f"Cannot read {path.name}: {exc}") from exc
        self._set(preview=None, result=None, restore_file=path.name)
        preview = await self._busy("Reading the backup…", self.client.preview_restore(text, passphrase or None))
        self._pending = (text, passphrase or None)
        self._set(preview=preview, node_names=await self._node_names(preview))
        return preview

    async def _node_names(self, preview: RestorePreview) -> dict[str, str]:
        """Node id -> name: the nodes the backup brings back, and this daemon's own."""
        names = {r.id: r.label for r in preview.rows if r.kind == "node"}
        try:
            names.update({n.id: n.name for n in await self.client.list_nodes()})
        except DaemonError as exc:  # the rows then name the nodes by id
            _LOGGER.warning("restore preview: the nodes' names are not known: %s", exc.message)
        return names

    def set_downloads(self, downloads: bool) -> None:
        """The preview's box: whether the restore fetches the missing model files (the rows say so)."""
        self._set(downloads=downloads)

    async def apply(self, downloads: bool = True) -> RestoreResult:
        """Restore what was previewed; with ``downloads`` the missing model files that can be fetched are."""
        if self._pending is None:
            raise ValueError("Preview a backup first.")
        text, passphrase = self._pending
        result = await self._busy("Restoring…", self.client.restore_backup(text, passphrase, downloads=downloads))
        self._pending = None
        self._set(preview=None, result=result, fetched=downloads)
        return result

    def cancel(self) -> None:
        self._pending = None
        self._set(preview=None, restore_file="", error=None)
