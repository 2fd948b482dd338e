"""Fixtures for the daemon tests: a fake runtime executable and a model file to point at."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "fake.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes())  # a tiny valid GGUF: the agent reads every header before a start
    return path


@pytest.fixture
def fake_runtime(tmp_path: Path) -> Path:
    return write_fake_runtime(tmp_path / "bin", token_delay_s=0.02, tokens=8)
