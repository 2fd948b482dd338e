"""``mirbadllm ctl nodes list`` shows each node's runtimes; ``ctl nodes show`` says where, or why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.api.runtimes import RuntimeOffer
from core.key_store import KeysAtRest
from daemon.api.nodes import NodeView
from mirbadllm import ctl, ctl_nodes
from tests.agent._support import eventually
from tests.daemon.harness import running_daemon

NODE = NodeView(id="local", name="workstation", local=True, runtimes=[
    RuntimeOffer(runtime="llamacpp", available=True, version="b4242 (fa4e1234)", digest="ab" * 32,
                 location="/opt/llama-server"),
    RuntimeOffer(runtime="vllm", available=False, reason="no Docker engine answers on this node")])


def test_the_runtimes_column_and_the_detail() -> None:
    assert ctl_nodes.fmt_runtimes(NODE) == "llama.cpp b4242 (fa4e1234), vLLM —, MLX —"
    assert ctl_nodes.fmt_runtimes(NODE.model_copy(update={"runtimes": []})) == "runtimes unknown"
    assert "llama.cpp b4242 (fa4e1234), vLLM —, MLX —" in ctl_nodes.fmt_node(NODE)
    detail = ctl_nodes.fmt_node_detail(NODE).splitlines()
    assert detail[1].split() == ["llama.cpp", "b4242", "(fa4e1234)", "/opt/llama-server", "digest", "abababababab"]
    assert detail[2].split(maxsplit=2) == ["vLLM", "—", "no Docker engine answers on this node"]
    assert detail[3].split(maxsplit=2) == ["MLX", "—", "its agent has no MLX driver"]
    plain = NODE.model_copy(update={"keys_at_rest": KeysAtRest(keychain=False, warning="agent.key is a 0600 file")})
    assert ctl_nodes.fmt_node_detail(plain).splitlines()[-1].split(maxsplit=1) == ["keys", "agent.key is a 0600 file"]


async def test_ctl_nodes_list_and_show_the_local_agents_runtimes(
        tmp_path: Path, fake_runtime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        async def reported() -> bool:
            return bool(next(n for n in await rd.client.list_nodes() if n.local).runtimes)

        await eventually(reported, what="the local agent's offers")
        assert await ctl_nodes.run(ctl.parse_args(["nodes", "list"]), rd.client) == 0
        assert "llama.cpp b4242 (fa4e1234), vLLM " in capsys.readouterr().out
        assert await ctl_nodes.run(ctl.parse_args(["nodes", "show", "local"]), rd.client) == 0
        lines = capsys.readouterr().out.splitlines()
        assert any(line.split()[:3] == ["llama.cpp", "b4242", "(fa4e1234)"] and str(fake_runtime) in line
                   for line in lines)
        assert any(line.split()[:2] == ["vLLM", "—"] for line in lines)
