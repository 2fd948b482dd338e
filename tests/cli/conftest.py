"""Fixtures of the terminal tests: a fake runtime, a model file, the fake hub's environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import write_gguf


@pytest.fixture
def fake_runtime(tmp_path: Path) -> Path:
    return write_fake_runtime(tmp_path / "bin", token_delay_s=0.02, tokens=8)


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "models" / "fake.gguf")


@pytest.fixture
def hf_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The agent child inherits these; each test sets ``HF_ENDPOINT`` to its fake hub."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield
