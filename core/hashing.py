"""One file hash: the SHA-256 of a file read in 1 MiB blocks, as lowercase hex."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
