"""``ModelFolder``: the files under the agent's models folder, and the one way one of them is removed.

Every path from a request is judged twice before anything is touched: by its text (absolute, no
``..``, under the folder: ``core.safe_names``) and by what it resolves to on this disk (no link on the
way that leads out of the folder, the file itself no link). A file a running instance reads is never
removed: the instances are asked at the moment of removal (``in_use``), not remembered.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from agent.api.files import FileRemoved, NodeFile, NodeFiles, files_in_args
from agent.api.models import InstanceState
from agent.manager import InstanceManager
from agent.problems import AgentProblem
from core.safe_names import UnsafeName, check_node_path, commonpath_inside

_LOGGER = logging.getLogger(__name__)

# (instance id, a path it reads): its model, its adapters, its projector or draft model.
InUse = Callable[[], Iterable[tuple[str, str]]]
_LIVE = (InstanceState.STARTING, InstanceState.READY, InstanceState.STOPPING)


class FileRefused(AgentProblem, status=403, code="outside_models_folder"):
    pass


def read_by_instances(manager: InstanceManager) -> list[tuple[str, str]]:
    """What each live instance reads (starting, ready, stopping, and every run in the records): its
    ``model_path`` and every file its argv names (adapters, projector, draft model)."""
    reads = [(i.instance_id, i.model_path, i.argv) for i in manager.page().instances if i.state in _LIVE]
    reads += [(i, run.record.model_path, run.record.argv) for i, run in manager.runs().items()]
    found: list[tuple[str, str]] = []
    for instance_id, model_path, argv in reads:
        if model_path:
            found.append((instance_id, model_path))
        found.extend((instance_id, path) for path, _role in files_in_args(argv))
    return found


class ModelFolder:
    """The models folder ``root``; ``in_use`` names what running instances read."""

    def __init__(self, root: Path, in_use: InUse) -> None:
        self.root = root
        self._in_use = in_use

    # --- listing ------------------------------------------------------------------------------
    def listing(self) -> NodeFiles:
        """Every plain file under the folder (links and hidden partial files left out), largest first."""
        files: list[NodeFile] = []
        if self.root.is_dir():
            for folder, dirs, names in os.walk(self.root, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in names:
                    if name.startswith("."):
                        continue  # a download's or a mirror's partial file: the transfer's own
                    path = Path(folder) / name
                    try:
                        info = path.lstat()
                    except OSError:
                        continue  # gone meanwhile
                    if stat.S_ISREG(info.st_mode):
                        files.append(NodeFile(path=str(path), size=info.st_size, mtime=info.st_mtime,
                                              links=max(info.st_nlink, 1)))
        files.sort(key=lambda f: (-f.size, f.path))
        disk = shutil.disk_usage(self.root if self.root.is_dir() else self.root.parent)
        return NodeFiles(models_dir=str(self.root), files=files, disk_total=disk.total, disk_free=disk.free)

    # --- removing -----------------------------------------------------------------------------
    def _real_root(self) -> str:
        return os.path.realpath(self.root)

    def checked(self, text: str) -> Path:
        """The file ``text`` names, if it may be removed; else the refusal that says why."""
        try:
            check_node_path(text, "path")
        except UnsafeName as exc:
            raise FileRefused(str(exc), status=400, code="unsafe_path") from exc
        path = Path(os.path.normpath(text))
        root = os.path.normpath(self.root)
        if not (str(path) != root and commonpath_inside(root, path)):
            raise FileRefused(f"{text[:300]} is not in the models folder ({root}); files outside it are "
                              "their owner's, never deleted by MirbadLLM")
        if path.name.startswith("."):
            raise FileRefused(f"{path.name} is a transfer's partial file; cancel the transfer instead",
                              status=409, code="file_in_transfer")
        real_root, real = self._real_root(), os.path.realpath(path)
        if not path.is_symlink() and not os.path.lexists(path):
            raise FileRefused(f"there is no file {text[:300]}", status=404, code="file_not_found")
        if real == real_root or not commonpath_inside(real_root, real):
            raise FileRefused(f"{text[:300]} leads out of the models folder (a link to {real[:300]}); "
                              "files outside it are never deleted by MirbadLLM")
        if path.is_symlink():
            raise FileRefused(f"{text[:300]} is a link, not a file; remove the file it points to",
                              status=422, code="not_a_file")
        if not path.is_file():
            what = "a folder" if path.is_dir() else "not a plain file"
            raise FileRefused(f"{text[:300]} is {what}; only files are removed, one at a time",
                              status=422, code="not_a_file")
        return path

    def _users(self, path: Path) -> list[str]:
        """The running instances that read ``path`` (the file itself, or a folder that holds it)."""
        real = os.path.realpath(path)
        users: set[str] = set()
        for instance_id, used in self._in_use():
            used_real = os.path.realpath(used)
            if used_real == real or commonpath_inside(used_real, real):
                users.add(instance_id)
        return sorted(users)

    def remove(self, text: str) -> FileRemoved:
        """Remove the file ``text`` names, then the folders it leaves empty (up to the models folder)."""
        path = self.checked(text)
        users = self._users(path)
        if users:
            raise FileRefused(f"{path.name} is in use by the running model(s) {', '.join(users)}; stop them first",
                              status=409, code="file_in_use", details={"instances": users})
        info = path.lstat()
        path.unlink()
        freed = info.st_size if info.st_nlink <= 1 else 0
        _LOGGER.info("removed %s (%d bytes, %d freed)", path, info.st_size, freed)
        return FileRemoved(path=str(path), size=info.st_size, freed=freed, folders_removed=self._prune(path.parent))

    def _prune(self, folder: Path) -> list[str]:
        removed: list[str] = []
        root = os.path.normpath(self.root)
        while os.path.normpath(folder) != root and commonpath_inside(root, folder):
            try:
                folder.rmdir()  # only an empty folder goes
            except OSError:
                break
            removed.append(str(folder))
            folder = folder.parent
        return removed
