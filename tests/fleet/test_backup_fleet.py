"""A real paired agent keeps trusting its daemon after the daemon's home is lost and restored from a
passphrase backup on a fresh one: the CA and the client certificate the agent pinned come back, and
the node is online again after the restart. Without the passphrase the node cannot come back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.api.nodes import NodeState
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent

PASSPHRASE = "a fleet's long passphrase"
FAST = {"nodes": {"interval_s": 0.5, "probe_timeout_s": 1.0}}


@pytest.fixture
async def agent(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[InProcessAgent]:
    started = await start_inprocess_agent(tmp_path / "agent", name="zeta", llama_server=runtime_exe)
    yield started
    await started.close()


async def _online(rd: RunningDaemon, node_id: str) -> bool:
    return (await rd.client.get_node(node_id)).state == NodeState.ONLINE


async def test_a_restored_daemon_is_trusted_by_the_node_it_had_paired(agent: InProcessAgent, tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "old", None, local_agent=False, **FAST) as old:
        offer = agent.last("pairing")
        node = await old.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", offer["code"], offer["fingerprint"])
        await eventually(lambda: _online(old, node.id), what="the node online")
        with_secrets = await old.client.create_backup(PASSPHRASE)
        without = await old.client.create_backup()

    async with running_daemon(tmp_path / "plain", None, local_agent=False, **FAST) as plain:
        preview = await plain.client.preview_restore(without)
        [row] = [r for r in preview.rows if r.kind == "node"]
        assert row.change == "skipped" and "another CA" in (row.note or "")

    home = tmp_path / "new"
    async with running_daemon(home, None, local_agent=False, **FAST) as new:
        result = await new.client.restore_backup(with_secrets, PASSPHRASE)
        assert result.failed == [] and result.restart_required
    async with running_daemon(home, None, local_agent=False, **FAST) as again:
        await eventually(lambda: _online(again, node.id), what="the restored daemon's node online")
        assert (await again.client.get_node(node.id)).name == "zeta"
