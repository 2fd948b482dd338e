"""One file hash: the SHA-256 of a file read in 1 MiB blocks, as lowercase hex.

``update_from_file`` is the one loop that reads a file into a digest; ``file_sha256`` is what
nearly every caller wants. A download that resumes feeds the bytes it already has into its running
digest (SHA-256, or a git blob's SHA-1) with ``update_from_file`` and hashes the rest as it arrives.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

_LOGGER = logging.getLogger(__name__)

BLOCK = 1 << 20


class Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


def update_from_file(digest: Digest, path: Path, *, limit: int | None = None,
                     on_bytes: Callable[[int], None] | None = None) -> int:
    """Feed ``path``'s first ``limit`` bytes (all of it: None) into ``digest``; the bytes read.
    ``on_bytes`` is called with the running total after each block (a progress bar)."""
    done = 0
    with path.open("rb") as fh:
        while limit is None or done < limit:
            block = fh.read(BLOCK if limit is None else min(BLOCK, limit - done))
            if not block:
                break
            digest.update(block)
            done += len(block)
            if on_bytes is not None:
                on_bytes(done)
    return done


def file_sha256(path: Path, *, limit: int | None = None, on_bytes: Callable[[int], None] | None = None) -> str:
    """The SHA-256 of ``path`` (of its first ``limit`` bytes when given), as lowercase hex."""
    digest = hashlib.sha256()
    update_from_file(digest, path, limit=limit, on_bytes=on_bytes)
    return digest.hexdigest()
