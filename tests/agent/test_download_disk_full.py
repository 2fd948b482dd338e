"""A download that fills the disk: a clear error, no partial file used or left, the space freed.

The agent's models folder is a 1 MiB tmpfs (root only; skipped elsewhere) and the file is 3 MiB."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from agent.api.sources import DownloadRequest, HfFileRef, TransferState
from tests.agent._sources_support import SourcesAgent, sources_agent
from tests.agent.test_downloads import REPO, finished, hub  # noqa: F401 - the fake hub fixture
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

BIG = gguf_bytes() + bytes(3 * 1024 * 1024)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system where the agent keeps its models."""
    where = tmp_path / "agent" / "models"
    where.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=False,
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
async def agent(tmp_path: Path, small_disk: Path, fake_runtime: Callable[..., Path],
                port_base: int) -> AsyncIterator[SourcesAgent]:
    async with sources_agent(tmp_path, fake_runtime(), port_base) as running:
        assert running.models_dir == small_disk
        yield running


async def test_a_download_that_fills_the_disk_fails_clearly_and_frees_the_space(
        hub: FakeHub, agent: SourcesAgent) -> None:  # noqa: F811 - the fixture
    hub.add(REPO, "big.gguf", BIG)
    free_before = shutil.disk_usage(agent.models_dir).free
    started = await agent.client.download(DownloadRequest(hf=HfFileRef(repo=REPO, file="big.gguf")))
    info = await finished(agent.client, started.id)
    assert info.state is TransferState.FAILED
    assert "space" in (info.error or "").lower() and str(agent.models_dir) in (info.error or "")
    assert [p.name for p in agent.models_dir.rglob("*") if p.is_file()] == []  # no partial file kept
    assert shutil.disk_usage(agent.models_dir).free == free_before  # the space is given back
    assert (await agent.client.transfers()).transfers[-1].result == []


async def test_a_disk_that_fills_up_during_the_download_leaves_nothing(hub: FakeHub,  # noqa: F811
                                                                     agent: SourcesAgent) -> None:
    """The file fits when it starts; something else takes the space meanwhile."""
    data = gguf_bytes() + bytes(600 * 1024)
    hub.add(REPO, "mid.gguf", data, chunk_delay=0.05)
    free_before = shutil.disk_usage(agent.models_dir).free
    started = await agent.client.download(DownloadRequest(hf=HfFileRef(repo=REPO, file="mid.gguf")))
    page = await agent.client.transfers()
    while not next(t for t in page.transfers if t.id == started.id).bytes_done:
        page = await agent.client.transfers(since=page.version, timeout=10)
    filler = agent.models_dir / "other-program.bin"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        out.write(bytes(900 * 1024))  # as much as still fits
    info = await finished(agent.client, started.id)
    assert info.state is TransferState.FAILED and "filled up" in (info.error or "")
    assert [p.name for p in agent.models_dir.rglob("*") if p.is_file()] == ["other-program.bin"]
    filler.unlink()
    assert shutil.disk_usage(agent.models_dir).free == free_before
