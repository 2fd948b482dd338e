"""A daemon start with its local agent is quiet: no warning about a node that is merely booting."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from daemon.api.nodes import NodeState
from tests.daemon.harness import running_daemon
from tests.fleet.agents import eventually


async def test_a_start_with_the_local_agent_logs_no_warning(tmp_path: Path, fake_runtime: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="daemon")
    fast = {"interval_s": 0.2, "probe_timeout_s": 1.0}  # several monitor rounds while the agent boots
    async with running_daemon(tmp_path / "daemon", fake_runtime, nodes=fast) as rd:
        async def local_online() -> bool:
            return (await rd.client.get_node("local")).state == NodeState.ONLINE

        await eventually(local_online, what="the local node online")
        warnings = [r.getMessage() for r in caplog.records
                    if r.name.startswith("daemon") and r.levelno >= logging.WARNING]
        assert warnings == []
        assert any("node local is online" in r.getMessage() for r in caplog.records)
