"""The demo's model files: each node's models folder in memory, behind ``DemoDaemon``.

A mixin like ``memory_daemon.host_services``: it uses the daemon's ``definitions``, ``nodes``,
``delete_model`` and ``_record``. It decides what the real daemon decides with the same pure
functions (``daemon.api.files``: which model uses which file, what removing a model with its files
deletes and keeps), and refuses what the daemon and the agent refuse (409 ``file_in_use``, 403
``outside_models_folder``, 404 ``file_not_found``). ``add_node_file`` puts a file on a node for a test.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from core.safe_names import lexically_inside
from daemon.api.client import DaemonError
from daemon.api.files import (
    FileRemoved,
    ModelRemoval,
    NodeFiles,
    NodeFilesView,
    file_views,
    removal_plan,
    uses_of,
)
from daemon.api.models import AUTO_NODE, ModelDefinition
from daemon.api.nodes import NodeView

GIB = 2**30
BARE_MODELS_DIR = "/models"  # where the tests' definitions put their files


class DemoDisk:
    if TYPE_CHECKING:
        definitions: dict[str, ModelDefinition]
        nodes: list[NodeView]

        def _record(self, name: str, *args: object) -> None: ...
        async def delete_model(self, model_id: str) -> None: ...

    def _seed_disk(self) -> None:
        self.models_dir = BARE_MODELS_DIR
        self.disk_total, self.disk_free = 512 * GIB, 100 * GIB
        self.disk_files: dict[str, dict[str, tuple[int, float]]] = {}  # node -> path -> (size, mtime)

    def add_node_file(self, node: str, path: str, size: int, mtime: float | None = None) -> None:
        """A file in ``node``'s models folder (a test's download, say); the disk's free space shrinks."""
        self.disk_files.setdefault(node, {})[path] = (size, time.time() if mtime is None else mtime)
        self.disk_free = max(self.disk_free - size, 0)

    def _disk_node(self, wanted: str) -> str:
        found = next((n.id for n in self.nodes if wanted in (n.id, n.name)), None)
        if found is None:
            raise DaemonError(404, "node_unknown", f"node '{wanted}' is unknown")
        return found

    def _node_listing(self, node: str) -> NodeFiles:
        files = [{"path": p, "size": s, "mtime": m} for p, (s, m) in self.disk_files.get(node, {}).items()]
        files.sort(key=lambda f: (-int(f["size"]), str(f["path"])))
        return NodeFiles.model_validate({"models_dir": self.models_dir, "files": files,
                                         "disk_total": self.disk_total, "disk_free": self.disk_free})

    def _drop_file(self, node: str, path: str) -> FileRemoved:
        size, _mtime = self.disk_files[node].pop(path)
        self.disk_free += size
        return FileRemoved(path=path, size=size, freed=size)

    async def node_files(self, node_id: str = "local") -> NodeFilesView:
        self._record("node_files", node_id)
        node = self._disk_node(node_id)
        listing = self._node_listing(node)
        name = next(n.name for n in self.nodes if n.id == node)
        return NodeFilesView(node=node, node_name=name, models_dir=listing.models_dir,
                             files=file_views(node, listing, self.definitions.values()),
                             disk_total=listing.disk_total, disk_free=listing.disk_free)

    async def remove_node_file(self, node_id: str, path: str) -> FileRemoved:
        self._record("remove_node_file", node_id, path)
        node = self._disk_node(node_id)
        used_by = uses_of(path, node, self.definitions.values())
        if used_by:
            raise DaemonError(409, "file_in_use", f"{path} is used by {', '.join(u.model for u in used_by)}")
        if not lexically_inside(self.models_dir, path):
            raise DaemonError(403, "outside_models_folder", f"{path} is not in the models folder ({self.models_dir})")
        if path not in self.disk_files.get(node, {}):
            raise DaemonError(404, "file_not_found", f"there is no file {path}")
        return self._drop_file(node, path)

    async def delete_model_with_files(self, model_id: str) -> ModelRemoval:
        self._record("delete_model_with_files", model_id)
        if model_id not in self.definitions:
            raise DaemonError(404, "model_not_found", f"no model '{model_id}'")
        definition = self.definitions[model_id]
        if definition.node == AUTO_NODE:
            raise DaemonError(409, "files_unknown", f"model '{model_id}' has not run on any node yet")
        node = self._disk_node(definition.node)
        listing = self._node_listing(node)
        await self.delete_model(model_id)
        delete, kept = removal_plan(definition, node, listing, self.definitions.values())
        deleted = [self._drop_file(node, p) for p in delete if p in self.disk_files.get(node, {})]
        name = next(n.name for n in self.nodes if n.id == node)
        return ModelRemoval(model=model_id, node=node, node_name=name, deleted=deleted, kept=kept,
                            freed=sum(d.freed for d in deleted))
