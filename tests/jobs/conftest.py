"""Fixtures of the job tests: a model file the agent's checks accept and the fake runtime "loads"."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

_LOGGER = logging.getLogger(__name__)


def write_tiny_gguf(path: Path) -> Path:
    """A GGUF v3 header with an architecture, a name and no tensors."""
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value.encode())) + value.encode()

    meta = [("general.architecture", "llama"), ("general.name", "job test model")]
    body = b"".join(text(k) + struct.pack("<I", 8) + text(v) for k, v in meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta)) + body)
    return path


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    return write_tiny_gguf(tmp_path / "models" / "fake.gguf")
