"""``mirbadllm ctl downloads`` against a real daemon, its agent and the fake hub: a running download
listed with its progress, paused, refused a resume of an unknown id (exit 1, the daemon's reason),
cancelled, and listed as cancelled."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.api.sources import HfFileRef
from daemon.api.sources import DownloadQuery
from mirbadllm import ctl
from tests.daemon.harness import running_daemon
from tests.daemon.test_downloads import wait_for
from tests.daemon.test_sources_api import hf_env  # noqa: F401 - the fixture
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes


async def _ctl(home: Path, *argv: str) -> int:
    return await asyncio.to_thread(ctl.main, ["--home", str(home), *argv])


async def test_ctl_downloads_lists_pauses_and_cancels(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add("acme/slow-GGUF", "slow-Q4_K_M.gguf", gguf_bytes() + bytes(4_000_000), chunk_delay=0.05)
    home = tmp_path / "home"
    try:
        async with running_daemon(home, fake_runtime) as d:
            started = await d.client.download(DownloadQuery(hf=HfFileRef(repo="acme/slow-GGUF", quant="Q4_K_M")))
            await wait_for(d.client, started.id, lambda t: t.bytes_done > 0)
            capsys.readouterr()
            assert await _ctl(home, "downloads") == 0
            listed = capsys.readouterr().out
            assert started.id in listed and "running" in listed and "acme/slow-GGUF" in listed and " of " in listed

            assert await _ctl(home, "downloads", "pause", started.id) == 0
            assert "paused" in capsys.readouterr().out
            assert await _ctl(home, "downloads", "resume", "x999") == 1
            assert "no transfer 'x999'" in capsys.readouterr().err
            assert await _ctl(home, "downloads", "cancel", started.id) == 0
            assert "cancelled" in capsys.readouterr().out
            assert await _ctl(home, "downloads", "list") == 0
            assert f"{started.id:<6} cancelled" in capsys.readouterr().out
    finally:
        await hub.close()
