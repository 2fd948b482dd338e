"""``mirbadllm ctl nodes runtime-upgrade``: a llama.cpp build rolled out from a terminal, as a person types it.

Two agent processes on loopback, each running the OLD build (``test_runtime_rollout``'s builds);
ctl waits for the rollout and prints each node's state as it changes, then every node's outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.api.client import DaemonError
from mirbadllm import ctl, ctl_nodes
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fleet.test_fleet_loopback import FAST_MONITOR, pair
from tests.fleet.test_runtime_rollout import (
    NEW,
    OLD,
    agent_with_build,
    node_offers,
    write_build,
)

pytestmark = pytest.mark.slow


async def ctl_run(rd: RunningDaemon, *argv: str) -> int:
    args = ctl.parse_args(["nodes", *argv])
    return await ctl_nodes.run(args, rd.client)


async def test_ctl_rolls_a_build_out_one_node_at_a_time_and_prints_each_state(
        agents: Any, tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alpha = await agent_with_build(agents, tmp_path, "alpha")
    beta = await agent_with_build(agents, tmp_path, "beta")
    new_build = write_build(tmp_path / "release", NEW)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        ids = [await pair(rd, alpha), await pair(rd, beta)]
        for node_id in ids:
            await node_offers(rd, node_id, OLD)

        code = await ctl_run(rd, "runtime-upgrade", "--folder", str(new_build), "--smoke-model", str(model_file))
        out = capsys.readouterr().out
        assert code == 0, out
        lines = [line.split() for line in out.splitlines() if line.startswith("  ")]
        assert lines[:4] == [["alpha", "upgrading"], ["alpha", "done"], ["beta", "upgrading"], ["beta", "done"]]
        assert f"llama.cpp {new_build.name}: done on 2 node(s)" in out
        assert out.count(f"(was llama.cpp {OLD}") == 2
        for node_id in ids:
            await node_offers(rd, node_id, NEW)
        assert (await rd.client.runtime_upgrade_status()).wanted.keys() == set(ids)


async def test_ctl_says_which_node_failed_and_exits_1_when_the_smoke_test_fails(
        agents: Any, tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alpha = await agent_with_build(agents, tmp_path, "alpha")
    beta = await agent_with_build(agents, tmp_path, "beta")
    bad = write_build(tmp_path / "release", NEW, exit_code=1)  # the fake's crash switch: dies at start
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        a = await pair(rd, alpha)
        await pair(rd, beta)
        await rd.client.create_model(model("on-alpha", str(model_file), node=a))  # the default smoke model

        code = await ctl_run(rd, "runtime-upgrade", "--folder", str(bad))
        out = capsys.readouterr().out
        assert code == 1, out
        assert "failed: " in out and "node alpha" in out and "smoke test failed" in out
        states = {line.split()[0]: line.split()[1] for line in out.splitlines()[-2:]}
        assert states == {"alpha": "failed", "beta": "pending"}  # beta was never told

        with pytest.raises(DaemonError) as refused:  # a folder that is no build: the daemon's 422, as ctl shows it
            await ctl_run(rd, "runtime-upgrade", "--folder", str(tmp_path / "nowhere"))
        assert refused.value.status == 422 and refused.value.code == "runtime_build_refused"
