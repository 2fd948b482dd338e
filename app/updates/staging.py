"""The staging folder and the update's outcome types.

The staging folder holds at most one verified update. Bytes arrive in ``.{name}.partial`` and are
renamed into place only once their size and SHA-256 match the signed feed; any refusal empties it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StagedUpdate:
    version: str
    platform: str
    path: Path
    size: int
    sha256: str


@dataclass(frozen=True)
class UpToDate:
    current: str
    latest: str

    @property
    def message(self) -> str:
        return "You have the latest version"


@dataclass(frozen=True)
class UpdateReady:
    staged: StagedUpdate

    @property
    def version(self) -> str:
        return self.staged.version

    @property
    def message(self) -> str:
        return f"MirbadLLM {self.staged.version} is ready — Restart to update"


UpdateResult = UpToDate | UpdateReady


class StagingFolder:
    def __init__(self, root: Path) -> None:
        self.root = root

    def partial(self, name: str) -> Path:
        return self.root / f".{name}.partial"

    def final(self, name: str) -> Path:
        return self.root / name

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(".*.partial"):
            stale.unlink(missing_ok=True)

    def clear(self, keep: Path | None = None) -> None:
        """Remove everything staged (but ``keep``)."""
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            if keep is not None and entry == keep:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def contents(self) -> list[Path]:
        return sorted(self.root.iterdir()) if self.root.is_dir() else []
