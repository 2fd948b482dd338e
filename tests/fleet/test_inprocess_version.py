"""An agent run in another program's loop (``agent.inprocess``: the demo's nodes, the tests' agents)
reports the version it was started with, as ``mirbadllm agent`` reports its own: the daemon's node
list says it (it said the program's version instead, whatever the agent was given)."""

from __future__ import annotations

from pathlib import Path

from tests.daemon.harness import RunningDaemon
from tests.fleet.inprocess import pair_online, start_inprocess_agent


async def test_the_node_reports_the_version_its_agent_was_started_with(rd: RunningDaemon, tmp_path: Path,
                                                                      runtime_exe: Path) -> None:
    agent = await start_inprocess_agent(tmp_path / "agent", name="older", llama_server=runtime_exe, version="0.0.7")
    try:
        node = await pair_online(rd, agent)
        assert (await rd.client.get_node(node)).version == "0.0.7"
    finally:
        await agent.close()
