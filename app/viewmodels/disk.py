"""A node's Disk, on the Nodes page: the model files of its models folder, each with its size and
the models that use it, the disk's free space, and removing what no model needs.

"Remove unused files" removes each file no model uses (the daemon refuses one a model uses, and
the agent one a running instance reads, whatever this shows); removing a model with its files
deletes the files only it uses in its node's models folder (``daemon.api.files``). Both are asked
first with the space they free (``unused_question``, ``removal_preview``), and both read the
listing again afterwards.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace

from app import format as fmt
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.files import (
    ModelRemoval,
    NodeFilesView,
    NodeFileView,
    files_to_free,
    unused_files,
)
from daemon.api.models import AUTO_NODE
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

ROLE_TEXT = {"model": "", "adapter": " (adapter)", "projector": " (projector)", "draft": " (draft)", "file": " (file)"}


def _name(path: str) -> str:
    """A node path's file name, under either OS's separators (the node may be another OS)."""
    return re.split(r"[\\/]", path)[-1]


def used_by_text(f: NodeFileView) -> str:
    return ", ".join(f"{u.model}{ROLE_TEXT[u.role]}" for u in f.used_by) or "Unused"


def shown_path(f: NodeFileView, models_dir: str) -> str:
    """The file's path inside the models folder (the folder is said once, above the table)."""
    prefix = models_dir.rstrip("/\\")
    return f.path[len(prefix) + 1:] if f.path.startswith(prefix) and len(f.path) > len(prefix) else f.path


@dataclass(frozen=True)
class RemovalPreview:
    """What removing a model with its files deletes, for the question asked first."""

    model: str
    node_name: str
    files: tuple[NodeFileView, ...]

    @property
    def frees(self) -> int:
        return sum(f.frees for f in self.files)

    @property
    def question(self) -> str:
        if not self.files:
            return (f"Delete “{self.model}”? None of its files would be deleted: each is used by another model "
                    "or lies outside the models folder.")
        names = "\n".join(f"• {_name(f.path)} ({fmt.size(f.size)})" for f in self.files[:6])
        more = f"\n• and {len(self.files) - 6} more" if len(self.files) > 6 else ""
        return (f"Delete “{self.model}” and {len(self.files)} file(s) on {self.node_name}, freeing "
                f"{fmt.size(self.frees)}?\n{names}{more}\nFiles other models use, and files outside the models "
                "folder, stay.")


@dataclass(frozen=True)
class DiskState:
    node_id: str | None = None
    listing: NodeFilesView | None = None
    loading: bool = False
    busy: bool = False  # a removal under way
    error: str | None = None

    @property
    def unused(self) -> list[NodeFileView]:
        return unused_files(self.listing) if self.listing is not None else []

    @property
    def summary(self) -> str:
        if self.error:
            return self.error
        if self.listing is None:
            return "Reading the models folder…" if self.loading else ""
        s = self.listing
        held = sum(f.size for f in s.files)
        line = (f"{fmt.size(s.disk_free)} free of {fmt.size(s.disk_total)} · {len(s.files)} file(s), "
                f"{fmt.size(held)} in the models folder")
        unused = self.unused
        return line + (f" · {len(unused)} unused, {fmt.size(s.unused_bytes)}" if unused else "")

    @property
    def unused_question(self) -> str:
        unused = self.unused
        frees = self.listing.unused_bytes if self.listing is not None else 0
        return (f"Delete {len(unused)} file(s) no model uses, freeing {fmt.size(frees)}?\n"
                + "\n".join(f"• {_name(f.path)} ({fmt.size(f.size)})" for f in unused[:8])
                + (f"\n• and {len(unused) - 8} more" if len(unused) > 8 else ""))


class DiskViewModel:
    def __init__(self, client: DaemonApi, fleet: FleetViewModel) -> None:
        self.client = client
        self.fleet = fleet
        self.state: Observable[DiskState] = Observable(DiskState())

    async def load(self, node_id: str) -> None:
        """Read ``node_id``'s models folder (again)."""
        s = self.state.value
        fresh = s.node_id != node_id
        self.state.set(replace(s, node_id=node_id, loading=True, listing=None if fresh else s.listing,
                               error=None if fresh else s.error))
        try:
            listing = await self.client.node_files(node_id)
        except DaemonError as exc:
            if self.state.value.node_id == node_id:
                self.state.set(replace(self.state.value, listing=None, loading=False, error=exc.message))
            return
        if self.state.value.node_id == node_id:  # not the answer to a node since left
            self.state.set(replace(self.state.value, listing=listing, loading=False, error=None))

    async def remove_unused(self) -> str:
        """Remove every file no model uses on the shown node; what was freed (and what was refused)."""
        s = self.state.value
        if s.node_id is None or s.listing is None:
            raise ValueError("Choose a node first.")
        node_id = s.node_id
        self.state.set(replace(s, busy=True))
        freed, removed, refused = 0, 0, []
        try:
            for f in unused_files(s.listing):
                try:
                    freed += (await self.client.remove_node_file(node_id, f.path)).freed
                    removed += 1
                except DaemonError as exc:  # in use since, or by a running instance: it stays
                    refused.append(f"{_name(f.path)}: {exc.message}")
        finally:
            self.state.set(replace(self.state.value, busy=False))
            await self.load(node_id)
        text = f"Removed {removed} unused file(s), freed {fmt.size(freed)}"
        return text + (f"; kept {len(refused)}: " + "; ".join(refused) if refused else "")

    async def removal_preview(self, model_id: str) -> RemovalPreview:
        """What removing ``model_id`` with its files deletes, read from its node now."""
        view = await self.client.get_model(model_id)
        node = view.status.node or view.definition.node
        if node == AUTO_NODE:
            raise ValueError(f"“{view.definition.served_name}” has not run on any node yet, so which files are its "
                             "own is unknown: delete it without its files.")
        listing = await self.client.node_files(node)
        return RemovalPreview(view.definition.served_name, listing.node_name, tuple(files_to_free(listing, model_id)))

    async def remove_model_with_files(self, model_id: str) -> str:
        removal: ModelRemoval = await self.fleet.delete_model_with_files(model_id)
        if self.state.value.node_id == removal.node:
            await self.load(removal.node)
        kept = "; ".join(f"kept {_name(k.path)} ({k.message})" for k in removal.kept)
        return (f"Deleted {removal.model} and {len(removal.deleted)} file(s), freed {fmt.size(removal.freed)}"
                + (f"; {kept}" if kept else ""))
