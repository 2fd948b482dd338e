"""``core.hashing``: the one file hash, its prefix (a resumed transfer) and its progress calls."""

from __future__ import annotations

import hashlib
from pathlib import Path

from core.hashing import BLOCK, file_sha256, update_from_file


def test_a_file_hashes_as_sha256sum_does(tmp_path: Path) -> None:
    data = bytes(range(256)) * (BLOCK // 256 * 2 + 3)  # two blocks and a bit
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(path, limit=BLOCK + 5) == hashlib.sha256(data[:BLOCK + 5]).hexdigest()
    assert file_sha256(path, limit=len(data) + 10) == hashlib.sha256(data).hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_sha256(empty) == hashlib.sha256(b"").hexdigest()


def test_progress_counts_up_to_the_size_and_a_running_digest_continues(tmp_path: Path) -> None:
    data = b"x" * (BLOCK + 7)
    path = tmp_path / "blob"
    path.write_bytes(data)
    seen: list[int] = []
    assert file_sha256(path, on_bytes=seen.append) == hashlib.sha256(data).hexdigest()
    assert seen == [BLOCK, BLOCK + 7]
    running = hashlib.sha1(b"blob header\0")  # a git blob's SHA-1, as a resumed download keeps it
    assert update_from_file(running, path, limit=10) == 10
    running.update(data[10:])
    assert running.hexdigest() == hashlib.sha1(b"blob header\0" + data).hexdigest()
