"""One real model across two machines: a daemon, a main agent here and a helper agent in a network
namespace (its own address, its own loopback), and the real Gemma 3 270M on the real llama-server
with half its layers held by the helper's real ggml-rpc-server (llama.cpp RPC).

The model is defined with ``rpc_nodes=[the helper]`` and started through the daemon's admin API:
the helper's rpc-server starts for a grant naming the main node, the main's llama-server connects
to it (the rpc-server's log says so) through the agents' mutual-TLS tunnel, and a chat completion through
the daemon's /v1 with the real openai client answers. The helper's RPC port is bound to its own
loopback: nothing here reaches it. Stopping the model stops the helper's rpc-server.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import openai
import pytest

from agent.api.rpc import RpcServerState
from agent.runtimes.catalog import rpc_server_name
from daemon.api.models import ModelState
from daemon.api.plan import PlanQuery
from tests.daemon.harness import model, running_daemon
from tests.fleet.agents import eventually
from tests.runtime_parts import no_runtime

pytestmark = [pytest.mark.e2e, pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(600)]

MONITOR = {"interval_s": 0.5, "probe_timeout_s": 2.0, "offline_after": 3}
HALF_OF_GEMMA = 9  # of its 18 layers: the last 9 go to the helper's RPC device


@pytest.fixture
def rpc_llama_server(real_llama_server: Path) -> Path:
    """The real llama-server with llama.cpp's ggml-rpc-server beside it (``make runtime`` builds both):
    the one the agent picks, else another build in the same runtimes folder that has it."""
    if (real_llama_server.parent / rpc_server_name()).is_file():
        return real_llama_server
    builds = real_llama_server.parent.parent.parent  # <root>/llamacpp-<version>-<key>/bin/llama-server
    for manifest in sorted(builds.glob("*/runtime.json"), reverse=True):
        if '"rpc_server"' in manifest.read_text(encoding="utf-8"):
            found = manifest.parent / "bin" / real_llama_server.name
            if found.is_file() and (found.parent / rpc_server_name()).is_file():
                return found
    no_runtime(f"no llama.cpp build with {rpc_server_name()}: rebuild the runtime (`make runtime`)")


async def _refused(host: str, port: int) -> bool:
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except (ConnectionRefusedError, OSError):
        return True
    writer.close()
    return False


def _listening(pid: int, port: int) -> list[str]:
    """The IPv4 addresses listening on ``port`` in the network namespace of process ``pid``."""
    addresses = []
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            addresses.append(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return addresses


async def test_one_model_across_two_nodes_answers_and_stops_its_helper(
        netns: Any, agents: Any, tmp_path: Path, rpc_llama_server: Path, gemma_gguf: Path) -> None:
    ns = netns()
    main = await agents("main", llama_server=rpc_llama_server)
    helper = await agents("helper", host=ns.ns_ip, port=9443, netns=ns.name, llama_server=rpc_llama_server)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=MONITOR) as rd:
        nodes = {}
        for name, agent in (("main", main), ("helper", helper)):
            pairing = agent.last("pairing")
            nodes[name] = await rd.client.pair_node(agent.address, pairing["code"], pairing["fingerprint"])
        main_id, helper_id = nodes["main"].id, nodes["helper"].id
        helper_link = rd.daemon.links[helper_id]
        await eventually(lambda: rd.daemon.nodes.lends(helper_id), timeout=30, what="the helper's rpc-server known")

        plan = await rd.client.plan(PlanQuery(model_path=str(gemma_gguf), ctx_size=1024))
        assert {n.node for n in plan.nodes} == {main_id, helper_id} and all(n.split for n in plan.nodes)
        (fleet,) = plan.fleet  # 270M fits on either node alone: a split is offered only when it must be
        assert fleet.state == "unavailable" and fleet.message.startswith("not needed: it runs on node")

        definition = model("gemma-split", str(gemma_gguf), node="main", rpc_nodes=["helper"],
                           settings={"ctx_size": 1024, "n_gpu_layers": HALF_OF_GEMMA}, startup_timeout_s=240)
        saved = (await rd.client.create_model(definition)).definition
        assert (saved.node, saved.rpc_nodes) == (main_id, [helper_id]), "names stored as node ids"

        ready = await rd.client.start_model("gemma-split", wait=True)
        assert ready.state == ModelState.READY, (ready.error, ready.last_log_lines)
        assert [(h.node, h.state) for h in ready.rpc_helpers] == [(helper_id, "ready")]
        assert ready.running_config_hash == ready.config_hash and not ready.restart_pending, "one hash, both sides"
        (server,) = await helper_link.client.rpc_servers()
        assert (server.state, server.peer_node_id) == (RpcServerState.READY, main_id), "the grant names the main node"
        assert server.grant_id == ready.rpc_helpers[0].grant_id and server.port and server.pid

        # The helper's RPC port is on its own loopback: its address does not reach it, and in its own
        # network namespace it listens on 127.0.0.1 only. (This machine's 127.0.0.1 is another loopback,
        # where a parallel test may hold the same port number, so it proves nothing either way.)
        assert await _refused(ns.ns_ip, server.port)
        assert _listening(server.pid, server.port) == ["127.0.0.1"]  # type: ignore[arg-type]

        client = openai.AsyncOpenAI(base_url=rd.v1, api_key="unused", max_retries=0, timeout=120)
        answer = await client.chat.completions.create(
            model="gemma-split", messages=[{"role": "user", "content": "Say hello in one word."}], max_tokens=8)
        assert answer.choices[0].message.content, answer
        assert answer.model == "gemma-split"
        # The helper's rpc-server got work: the main's llama-server connected to it through the tunnel.
        (log,) = helper.home.rglob(f"*{server.grant_id}*.log")
        assert "Accepted client connection" in log.read_text(encoding="utf-8", errors="replace")
        await client.close()

        stopped = await rd.client.stop_model("gemma-split")
        assert stopped.state == ModelState.STOPPED
        assert [(h.node, h.state) for h in stopped.rpc_helpers] == [(helper_id, "stopped")]
        left = [s for s in await helper_link.client.rpc_servers() if s.state == RpcServerState.READY]
        assert left == [], "the helper's rpc-server stops with the model"

        def gone() -> bool:
            try:
                os.kill(server.pid, 0)  # type: ignore[arg-type]
            except ProcessLookupError:
                return True
            return False

        await eventually(gone, timeout=30, what="the helper's rpc-server process to exit")
