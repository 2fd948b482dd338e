"""The agent's models folder: where downloads and imports land, and the only place they may write.

Every name that becomes a path here (a download's target folder, a repo's file name, an Ollama
model name) is checked with ``core.safe_names`` first, and every path built from it is
resolved (symlinks followed) and must stay inside the folder: a link planted in ``models/`` that
points elsewhere is refused, not followed. Checks come before any directory is created.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from agent.problems import AgentProblem
from core.safe_names import (
    UnsafeName,
    check_component,
    check_relative_name,
    link_out_of,
    real_inside,
)

_SLUG_RE = re.compile(r"[^a-z0-9]+")


class UnsafeTarget(AgentProblem, status=422, code="unsafe_name"):
    pass


def slug(text: str, limit: int = 40) -> str:
    """A model id made of lowercase letters, digits and '-' (``^[a-z0-9][a-z0-9-]{0,39}$``)."""
    value = _SLUG_RE.sub("-", text.lower()).strip("-")[:limit].strip("-")
    return value or "model"


class ModelStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def check_folder_name(self, name: str) -> str:
        try:
            return check_component(name, "target folder")
        except UnsafeName as exc:
            raise UnsafeTarget(str(exc)) from exc

    def target(self, folder: str, relative: str) -> Path:
        """``models/{folder}/{relative}``, checked; nothing is created (see ``prepare``)."""
        self.check_folder_name(folder)
        try:
            check_relative_name(relative, "file name")
        except UnsafeName as exc:
            raise UnsafeTarget(str(exc)) from exc
        path = self.root / folder / relative
        self._check_chain(path)
        return path

    def _check_chain(self, path: Path) -> None:
        """No existing part of ``path`` below the root is a link out of it, nor the file a link at all."""
        escape = link_out_of(self.root, path)
        if escape is not None:
            raise UnsafeTarget(f"{escape.relative_to(self.root)} leads out of the models folder")
        if path.is_symlink():
            raise UnsafeTarget(f"{path.relative_to(self.root)} is a link; refusing to write through it")

    def prepare(self, path: Path) -> Path:
        """Create the parent folders of a checked target, and check again once they exist."""
        self._check_chain(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not real_inside(self.root, path.parent / "x"):
            raise UnsafeTarget("the target folder leads out of the models folder")
        return path


def link_or_copy(source: Path, dest: Path, copy: bool = False) -> str:
    """Hard-link ``source`` as ``dest`` (same disk), else copy it; returns "linked" or "copied"."""
    dest.unlink(missing_ok=True)
    if not copy:
        try:
            os.link(source, dest, follow_symlinks=False)
            return "linked"
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
                raise
    shutil.copyfile(source, dest, follow_symlinks=False)
    return "copied"
