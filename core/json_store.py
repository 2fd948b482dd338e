"""One JSON file on disk, written atomically and validated by a pydantic model on load.

The daemon's ``models.json``, ``nodes.json`` and ``keys.json`` and the agent's ``processes.json``
all go through ``JsonStore``. What a store does with a file it cannot read (set it aside, refuse to
start, ignore it) stays with its owner: ``read`` raises ``UnreadableStore``.

``write_atomic`` and ``write_json_atomic`` are every program's one way to write a whole file
(config, tokens, certificates, state and cache files, a saved backup);
``tests/unit/test_one_implementation.py`` lists the few renames elsewhere and why.

Writes are atomic: a temp file in the same directory (``.{name}.*.tmp``), fsync, then
``os.replace``, so a reader (or a process killed mid-write) sees the old file or the new one, never
half of one. Mode bits are set on the temp file's path before any byte is written (``os.fchmod``
is missing on Windows before Python 3.13); on Windows they are skipped: there the file inherits the
ACL of its folder in the user's profile, and ``chmod`` only toggles the read-only flag.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def apply_mode(path: str | os.PathLike[str], mode: int, platform: str = sys.platform) -> bool:
    """Give ``path`` the POSIX ``mode``; False on Windows, where the folder's ACL applies instead."""
    if platform == "win32":
        return False
    os.chmod(path, mode)
    return True


def write_atomic(path: Path, data: bytes, mode: int = 0o600, platform: str = sys.platform) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        apply_mode(tmp, mode, platform)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def encode_json(value: Any) -> bytes:
    """The bytes every store writes: sorted keys, two-space indent, a final newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_json_atomic(path: Path, value: Any, mode: int = 0o600) -> None:
    write_atomic(path, encode_json(value), mode)


class UnreadableStore(Exception):
    """The file exists but is not JSON, or not the shape its model expects; ``cause`` says which."""

    def __init__(self, path: Path, cause: OSError | ValueError) -> None:
        super().__init__(str(cause))
        self.path = path
        self.cause = cause


class JsonStore(Generic[M]):
    """``path`` holding one ``model``, written with ``mode``."""

    def __init__(self, path: Path, model: type[M], *, mode: int = 0o600) -> None:
        self.path = path
        self.model = model
        self.mode = mode

    def read(self) -> M | None:
        """The validated content; None when there is no file. Raises ``UnreadableStore``."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise UnreadableStore(self.path, exc) from exc
        try:
            return self.model.model_validate(json.loads(text))
        except (ValueError, ValidationError) as exc:  # ValidationError is a ValueError
            raise UnreadableStore(self.path, exc) from exc

    def encode(self, value: M, *, json_mode: bool = True) -> bytes:
        return encode_json(value.model_dump(mode="json" if json_mode else "python"))

    def write(self, value: M, *, json_mode: bool = True) -> None:
        write_atomic(self.path, self.encode(value, json_mode=json_mode), self.mode)

    def write_bytes(self, data: bytes) -> None:
        """Write what ``encode`` returned (for a store that skips a write when nothing changed)."""
        write_atomic(self.path, data, self.mode)

    def set_aside(self) -> Path:
        """Move an unreadable file to ``{name}.invalid`` (kept for the user) and return that path."""
        backup = self.path.with_suffix(self.path.suffix + ".invalid")
        self.path.replace(backup)
        return backup

    def sweep_temps(self) -> None:
        """Remove the temp files of writes cut short (a process killed between create and replace)."""
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
