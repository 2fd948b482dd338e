"""Cancelling a mirror: the daemon stops its own push midway, the node drops what it received, and
the transfer is cancelled (a mirror has no transfer on an agent to cancel)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent.api.sources import TransferState
from daemon.api.mirror import MirrorQuery
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
