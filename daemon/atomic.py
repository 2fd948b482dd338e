"""Atomic file writes: a temp file in the same directory, fsync, then ``os.replace``.

A reader (or a daemon killed mid-write) sees the old file or the new one, never half of one.
Mode bits are set on the temp file's path before any byte is written (``os.fchmod`` is missing on
Windows before Python 3.13); on Windows they are skipped: there the file inherits the ACL of its
folder in the user's profile, and ``chmod`` only toggles the read-only flag.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

_LOGGER = logging.getLogger(__name__)


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


def write_json_atomic(path: Path, value: Any, mode: int = 0o600) -> None:
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode)
