"""Process limits a server needs: enough file descriptors for its connections.

A daemon holds two descriptors per relayed request (the client's and the runtime's) and one per
idle keep-alive connection; macOS starts a program with a soft limit of 256 open files and many
Linux sessions with 1,024, far below what an editor, a few agents and scripts keep open. The soft
limit is raised to the hard one (capped), as servers do at start; Windows has no such limit.
"""

from __future__ import annotations

import logging
import sys

_LOGGER = logging.getLogger(__name__)
WANTED_OPEN_FILES = 65_536


def raise_open_files_limit(wanted: int = WANTED_OPEN_FILES) -> int | None:
    """Raise this process's soft limit of open files toward ``wanted`` (never above the hard limit,
    never lowered); the soft limit now, or None where there is none (Windows)."""
    if sys.platform == "win32":
        return None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if sys.platform == "darwin":
        target = min(target, 10_240)  # OPEN_MAX: setrlimit refuses more there
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            _LOGGER.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft
