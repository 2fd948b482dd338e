"""Fixtures for the daemon tests: a fake runtime executable (the model file is tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import write_fake_runtime


@pytest.fixture
def fake_runtime(tmp_path: Path) -> Path:
    return write_fake_runtime(tmp_path / "bin", token_delay_s=0.02, tokens=8)
