"""The daemon as the fleet's checked mirror: a version on this machine pushed to a second node.

The daemon runs with its real local agent (the fake runtime); a second agent runs as its own
process on loopback and is paired. The source files sit in the local agent's models folder, as a
finished download leaves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.api.sources import TransferState
from daemon.api.client import DaemonError
from daemon.api.mirror import MirrorQuery
from daemon.api.models import ModelState
from daemon.api.sources import Transfer
from mirbadllm import ctl
from mirbadllm.ctl_sources import follow
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes.gguf_files import gguf_bytes
from tests.fleet.agents import AgentProcess
from tests.fleet.test_fleet_loopback import FAST_MONITOR, pair

pytestmark = pytest.mark.slow

PADDING = 200 * 1024  # past the header: a file of several pushes' chunks
CHUNK = 16 * 1024


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@asynccontextmanager
async def fleet(agents: Any, tmp_path: Path, runtime_exe: Path) -> AsyncIterator[tuple[RunningDaemon, AgentProcess,
                                                                                        str, Path, Path]]:
    """The daemon (local agent on), a paired node ``beta``, and a GGUF + projector in local's models folder."""
    starting = asyncio.ensure_future(agents("beta"))  # beta's start and the daemon's (its local agent's) overlap
    try:
        async with running_daemon(tmp_path / "daemon", runtime_exe, nodes=FAST_MONITOR) as rd:
            beta = await starting
            beta_id = await pair(rd, beta)
            folder = rd.daemon.paths.local_agent_home / "models" / "tiny"
            folder.mkdir(parents=True, exist_ok=True)
            gguf, projector = folder / "tiny-q4.gguf", folder / "mmproj-tiny.gguf"
            gguf.write_bytes(gguf_bytes() + bytes(n % 251 for n in range(PADDING)))
            projector.write_bytes(gguf_bytes(name="projector") + b"p" * 4096)
            rd.daemon.mirror.chunk = CHUNK
            yield rd, beta, beta_id, gguf, projector
    finally:
        with contextlib.suppress(Exception):  # started (the agents fixture stops it) or failed (said above)
            await starting


async def finished(rd: RunningDaemon, transfer: Transfer) -> Transfer:
    assert transfer.kind == "mirror" and transfer.state == TransferState.RUNNING
    return await follow(rd.client, transfer, io.StringIO())


async def test_a_registered_model_is_mirrored_checked_registered_and_started_on_a_second_node(
        agents: Any, tmp_path: Path, runtime_exe: Path) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, gguf, projector):
        await rd.client.create_model(model("tiny", str(gguf), extra_args=["--mmproj", str(projector)],
                                           settings={"ctx_size": 1024}))
        done = await finished(rd, await rd.client.mirror(MirrorQuery(model_id="tiny", target_node=beta_id)))

        assert done.state == TransferState.DONE, done.error
        placed, placed_projector = beta.home / "models" / "tiny" / "tiny-q4.gguf", \
            beta.home / "models" / "tiny" / "mmproj-tiny.gguf"
        assert _sha(placed) == _sha(gguf) and _sha(placed_projector) == _sha(projector)
        assert done.result[0].sha256 == _sha(gguf) and done.bytes_done == done.bytes_total
        assert not list((beta.home / "models" / "tiny").glob(".*"))  # no temporary file left
        assert done.registered == ["tiny-2"] and done.register_error is None

        copy = (await rd.client.get_model("tiny-2")).definition
        assert copy.node == beta_id and copy.model_path == str(placed)
        assert copy.extra_args == ["--mmproj", str(placed_projector)] and copy.settings.ctx_size == 1024
        status = await rd.client.start_model("tiny-2", wait=True)
        assert status.state == ModelState.READY, status.error
        assert status.pid in beta.runtime_pids()
        assert [t.id for t in await rd.client.transfers()] == [done.id]


async def test_a_cut_push_goes_on_from_the_bytes_the_node_has(agents: Any, tmp_path: Path,
                                                                runtime_exe: Path) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, gguf, _projector):
        cut = 5 * CHUNK
        rd.daemon.mirror.cut_at = cut + 100  # the stream breaks in the chunk after the fifth
        query = MirrorQuery(source_node="local", path="tiny/tiny-q4.gguf", target_node=beta_id, register_id="moved")
        done = await finished(rd, await rd.client.mirror(query))

        assert done.state == TransferState.DONE, done.error
        assert rd.daemon.mirror.pushes == [("tiny/tiny-q4.gguf", 0), ("tiny/tiny-q4.gguf", cut)]
        assert _sha(beta.home / "models" / "tiny" / "tiny-q4.gguf") == _sha(gguf)
        assert done.registered == ["moved"]
        assert (await rd.client.get_model("moved")).definition.node == beta_id


async def test_a_tampered_byte_is_refused_and_nothing_is_left_on_the_node(agents: Any, tmp_path: Path,
                                                                         runtime_exe: Path) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, _gguf, projector):
        rd.daemon.mirror.tamper_at = 3 * CHUNK + 7
        query = MirrorQuery(path=str(_gguf), projector_path=str(projector), target_node=beta_id)
        done = await finished(rd, await rd.client.mirror(query))

        assert done.state == TransferState.FAILED
        assert "checksum check failed" in (done.error or "") and "tiny/tiny-q4.gguf" in (done.error or "")
        folder = beta.home / "models" / "tiny"
        assert not folder.exists() or list(folder.iterdir()) == []
        assert done.registered == [] and [m.definition.id for m in await rd.client.list_models()] == []


async def test_refused_while_the_file_is_still_downloading_here_or_outside_the_models_folder(
        agents: Any, tmp_path: Path, runtime_exe: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with fleet(agents, tmp_path, runtime_exe) as (rd, beta, beta_id, gguf, _projector):
        partial = gguf.with_name(f".{gguf.name}.partial")  # what a running download writes beside its file
        partial.write_bytes(b"half")
        with pytest.raises(DaemonError) as refused:
            await rd.client.mirror(MirrorQuery(path=str(gguf), target_node=beta_id))
        assert refused.value.status == 409 and refused.value.code == "download_in_progress"

        outside = tmp_path / "elsewhere.gguf"
        outside.write_bytes(gguf_bytes())
        (gguf.parent / "link.gguf").symlink_to(outside)
        for path in (str(outside), "../../../elsewhere.gguf", "tiny/link.gguf"):
            with pytest.raises(DaemonError) as refused:
                await rd.client.mirror(MirrorQuery(path=path, target_node=beta_id))
            assert refused.value.status == 422 and refused.value.code == "outside_models_folder", path
        assert await rd.client.transfers() == []
        assert not (beta.home / "models" / "tiny").exists()

        partial.unlink()  # the download finished: now it goes, as `ctl models mirror FILE --to NODE`
        args = ctl.parse_args(["models", "mirror", str(gguf), "--to", beta_id[:10], "--no-register"])
        assert await ctl.run(args, rd.client) == 0
        assert f"got {beta.home / 'models' / 'tiny' / gguf.name}" in capsys.readouterr().out
        (done,) = await rd.client.transfers()
        assert done.kind == "mirror" and done.state == TransferState.DONE and done.registered == []
        assert _sha(beta.home / "models" / "tiny" / gguf.name) == _sha(gguf)
