"""A paired node's view carries how its agent's key is stored: without a keychain (the tests' default,
MIRBADLLM_KEYRING=off) the Nodes page is told its agent.key is a plain 0600 file, and why."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.api.nodes import NodeState
from tests.daemon.harness import RunningDaemon
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent


@pytest.fixture
async def agent(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[InProcessAgent]:
    started = await start_inprocess_agent(tmp_path / "agent", name="omega", llama_server=runtime_exe)
    yield started
    await started.close()


async def test_the_node_view_says_its_agent_key_is_a_plain_file(rd: RunningDaemon, agent: InProcessAgent) -> None:
    node = await rd.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", agent.last("pairing")["code"],
                                     agent.last("pairing")["fingerprint"])

    async def reported() -> bool:
        view = await rd.client.get_node(node.id)
        return view.state == NodeState.ONLINE and view.keys_at_rest is not None

    await eventually(reported, what="the paired node online with its keys-at-rest state")
    at_rest = (await rd.client.get_node(node.id)).keys_at_rest
    assert at_rest is not None and not at_rest.keychain and at_rest.plain_files == ["agent.key"]
    assert "0600" in (at_rest.warning or "") and "agent.key" in (at_rest.warning or "")
    listed = next(v for v in await rd.client.list_nodes() if v.id == node.id)
    assert listed.keys_at_rest == at_rest  # the list the Nodes page reads carries it too
