"""Put a new build in place of an old one in one rename, keeping the old one as ``NAME.old``.

Shared by the agent's self-upgrade and the app's AppImage update (the daemon side may import
``agent.api``; the agent may import nothing of the daemon's).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def previous_of(target: Path) -> Path:
    return target.with_name(target.name + ".old")


def swap_in(source: Path, target: Path, mode: int | None = None) -> Path:
    """Copy ``source`` beside ``target``, fsync it, keep ``target`` as ``NAME.old`` and rename the
    copy over it, so ``target`` always holds a whole program. Returns the ``.old`` path. On an
    ``OSError`` the half-written copy is removed and the error raised; ``target`` is untouched."""
    new = target.with_name(f".{target.name}.new")
    previous = previous_of(target)
    try:
        shutil.copyfile(source, new)
        if mode is None:
            mode = target.stat().st_mode & 0o777 if target.exists() else 0o755
        os.chmod(new, mode)
        with new.open("rb") as fh:
            os.fsync(fh.fileno())
        if target.exists():
            previous.unlink(missing_ok=True)
            try:
                os.link(target, previous)
            except OSError:
                shutil.copy2(target, previous)
        os.replace(new, target)
    except OSError:
        new.unlink(missing_ok=True)
        raise
    return previous
