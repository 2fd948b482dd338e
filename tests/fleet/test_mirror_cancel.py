"""Cancelling, pausing and retrying a mirror: the daemon stops its own push midway; a cancel has the
node drop what it received, a pause has it keep those bytes for the resume to go on from, and a retry
of a failed mirror runs it again (from 0 when the node dropped its bytes). A mirror has no transfer on
an agent: the daemon runs these verbs itself."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from agent.api.sources import TransferState
from daemon.api.mirror import MirrorQuery
from mirbadllm.ctl_sources import follow
from tests.fleet.test_mirror import CHUNK, finished, fleet

pytestmark = pytest.mark.slow


async def test_a_mirror_cancelled_midway_stops_its_push_and_leaves_nothing_on_the_node(
        agents: Any, tmp_path: Path, runtime_exe: Path) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, gguf, projector):
        mirror = rd.daemon.mirror
        mirror.hold_at = 4 * CHUNK + 10  # the push waits there, the node holding the bytes before it
        query = MirrorQuery(path=str(gguf), projector_path=str(projector), target_node=beta_id, register_id="moved")
        started = await rd.client.mirror(query)
        await asyncio.wait_for(mirror.held.wait(), 30)
        folder = beta.home / "models" / "tiny"
        partial = folder / f".{gguf.name}.mirror"
        assert [p.name for p in folder.iterdir()] == [partial.name] and partial.stat().st_size >= 4 * CHUNK

        cancelled = await rd.client.cancel_transfer(started.id)

        assert cancelled.state == TransferState.CANCELLED and cancelled.error is None
        assert list(folder.iterdir()) == []  # nothing of the version is left on the node
        assert mirror.pushes == [("tiny/tiny-q4.gguf", 0)]  # the push was not tried again
        assert [(t.id, t.state) for t in await rd.client.transfers()] == [(started.id, TransferState.CANCELLED)]
        assert await rd.client.list_models() == []
        assert (await rd.client.cancel_transfer(started.id)).state == TransferState.CANCELLED  # no change

        again = await finished(rd, await rd.client.mirror(query))  # from byte 0: no partial was kept
        assert again.state == TransferState.DONE, again.error
        assert mirror.pushes[1:] == [("tiny/tiny-q4.gguf", 0), ("tiny/mmproj-tiny.gguf", 0)]
        assert (folder / gguf.name).read_bytes() == gguf.read_bytes() and again.registered == ["moved"]


async def test_a_paused_mirror_keeps_the_nodes_bytes_and_resumes_from_them(
        agents: Any, tmp_path: Path, runtime_exe: Path) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, gguf, projector):
        mirror = rd.daemon.mirror
        mirror.hold_at = 4 * CHUNK + 10
        query = MirrorQuery(path=str(gguf), projector_path=str(projector), target_node=beta_id, register_id="moved")
        started = await rd.client.mirror(query)
        assert started.pausable  # the Downloads page and `ctl downloads` offer Pause
        await asyncio.wait_for(mirror.held.wait(), 30)

        paused = await rd.client.pause_transfer(started.id)

        assert paused.state == TransferState.PAUSED and paused.error is None
        partial = beta.home / "models" / "tiny" / f".{gguf.name}.mirror"
        kept = partial.stat().st_size
        assert kept >= 4 * CHUNK  # the node kept what it received
        assert (await rd.client.transfer(started.id)).state == TransferState.PAUSED

        done = await finished(rd, await rd.client.resume_transfer(started.id))

        assert done.id == started.id and done.state == TransferState.DONE, done.error
        assert mirror.pushes[0] == ("tiny/tiny-q4.gguf", 0)
        assert mirror.pushes[1][0] == "tiny/tiny-q4.gguf" and mirror.pushes[1][1] >= 4 * CHUNK  # on from the partial
        assert (beta.home / "models" / "tiny" / gguf.name).read_bytes() == gguf.read_bytes()
        assert done.registered == ["moved"] and done.bytes_done == done.bytes_total


async def test_a_failed_mirror_is_retried_from_the_start_when_the_node_dropped_its_bytes(
        agents: Any, tmp_path: Path, runtime_exe: Path) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, gguf, _projector):
        mirror = rd.daemon.mirror
        mirror.tamper_at = 2 * CHUNK + 3  # the first push arrives with one byte flipped: refused, nothing kept
        started = await rd.client.mirror(MirrorQuery(path=str(gguf), target_node=beta_id))
        failed = await follow(rd.client, started, io.StringIO())
        assert failed.state == TransferState.FAILED and "checksum check failed" in (failed.error or "")

        retried = await rd.client.retry_transfer(failed.id)
        assert retried.state == TransferState.RUNNING, (retried.error, retried.stage, retried.finished_at)
        done = await finished(rd, retried)

        assert done.id == failed.id and done.state == TransferState.DONE, done.error
        assert mirror.pushes == [("tiny/tiny-q4.gguf", 0), ("tiny/tiny-q4.gguf", 0)]  # started over
        assert (beta.home / "models" / "tiny" / gguf.name).read_bytes() == gguf.read_bytes()
        assert done.error is None and done.finished_at is not None
