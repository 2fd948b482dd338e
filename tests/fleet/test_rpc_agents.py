"""One real model across two agents: llama-server on the main node, ggml-rpc-server on the helper.

The real llama.cpp build (``make runtime``, with GGML_RPC) and the real Gemma 3 270M. The helper
agent opens a grant for the main node and starts its rpc-server on its own loopback; the main
agent starts llama-server with half of the layers on the helper (``--rpc`` through its forward,
carried by the helper's tunnel over mutual TLS); a chat completion answers. The helper's
rpc-server logs the main's connection and the main's llama-server puts a model buffer on the RPC
device. The helper's RPC port takes no connection from outside its machine (a network namespace
here), and a node the grant does not name is refused at the tunnel. A grant closed under the
running model fails it (SIGABRT in llama-server) rather than leaving it half there.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent.api.client import AgentClient
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import API_PREFIX, InstanceState, LaunchSpec
from agent.api.rpc import RpcPeer, RpcServerRequest, RpcServerState, rpc_tunnel_path
from agent.identity import load_or_create_identity
from agent.paths import AgentPaths
from agent.rpc.forwards import peer_client_context
from agent.runtimes.catalog import RuntimeCatalog
from daemon.nodes.pairing import pair
from daemon.nodes.store import node_ssl_context
from daemon.pki import CertificateAuthority, cert_pem
from daemon.tls import ensure_client_certificate
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent
from tests.runtime_parts import no_runtime

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GRANT = "split-gemma-0001"
LAYERS_ON_HELPER = 9  # of Gemma 3 270M's 18 and its output layer: these run on the helper, the rest here


@pytest.fixture
def rpc_build(real_llama_server: Path) -> Path:
    exe = RuntimeCatalog(real_llama_server).rpc_server()
    if exe is None:
        no_runtime(f"no ggml-rpc-server beside {real_llama_server}: run `make runtime` (GGML_RPC)")
    return exe.path


@dataclass
class Daemonish:
    """What a daemon holds for the test: the CA and its client certificate."""

    ca: CertificateAuthority
    key: Path
    cert: Path

    def client(self, url: str, node_pem: str) -> AgentClient:
        return AgentClient(url, node_ssl_context(node_pem, self.cert, self.key))


@pytest.fixture
def daemonish(tmp_path: Path) -> Daemonish:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    key, cert = ensure_client_certificate(ca, tmp_path / "pki")
    return Daemonish(ca, key, cert)


@pytest.fixture
async def main_agent(tmp_path: Path, daemonish: Daemonish, real_llama_server: Path,
                     rpc_build: Path) -> AsyncIterator[tuple[InProcessAgent, AgentClient, str]]:
    agent = await start_inprocess_agent(tmp_path / "main", name="main", llama_server=real_llama_server)
    try:
        paired = await agent.pair_with(daemonish.ca, daemonish.cert.read_text())
        client = daemonish.client(agent.url, paired.certificate_pem)
        try:
            yield agent, client, paired.node_id
        finally:
            await client.close()
    finally:
        await agent.close()


async def run_split(main: AgentClient, main_home: Path, helper: AgentClient, helper_url: str,
                    helper_node: str, main_node: str, gemma: Path) -> tuple[dict[str, Any], int]:
    """Open the grant, start the split model, ask it; (the answer, the helper's RPC port)."""
    info = await helper.start_rpc_server(RpcServerRequest(grant_id=GRANT, peer_node_id=main_node, threads=2))
    assert info.state is RpcServerState.READY and info.port is not None
    spec = LaunchSpec(instance_id="split", model_path=str(gemma), served_name="gemma-split",
                      settings=LlamaCppSettings(ctx_size=1024, parallel=1, threads=2, n_gpu_layers=LAYERS_ON_HELPER),
                      rpc_peers=[RpcPeer(agent_url=helper_url, grant_id=GRANT, node_id=helper_node)],
                      extra_args=["-lv", "4"], startup_timeout_s=180)  # -lv 4: llama-server logs its buffers
    await main.start(spec)
    ready = await eventually(lambda: _settled(main), timeout=240, interval=0.5, what="the split model to load")
    assert ready.state is InstanceState.READY, f"{ready.error}\n" + "\n".join(ready.last_log_lines)
    rpc_flag = ready.argv[ready.argv.index("--rpc") + 1]
    assert rpc_flag.startswith("127.0.0.1:") and "," not in rpc_flag  # one loopback forward, to the helper

    body = {"model": "gemma-split", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}
    async with main.session.post(main.proxy_url("split", "/v1/chat/completions"), json=body) as resp:
        assert resp.status == 200, await resp.text()
        answer = json.loads(await resp.text())
    assert answer["choices"][0]["message"]["content"].strip()
    assert answer["usage"]["completion_tokens"] > 0

    log = (main_home / "logs" / "split.log").read_text(errors="replace")
    # llama-server holds part of the model on the helper's RPC device, the rest here
    assert f"load_tensors: RPC0[{rpc_flag}] model buffer size" in log, log[-3000:]
    assert f"offloaded {LAYERS_ON_HELPER}/19 layers to GPU" in log
    return answer, info.port


async def _settled(client: AgentClient) -> Any:
    info = await client.instance("split")
    return info if info.state in (InstanceState.READY, InstanceState.FAILED) else None


async def _in(client: AgentClient, state: InstanceState) -> Any:
    info = await client.instance("split")
    return info if info.state is state else None


async def tunnel_refusal(url: str, context: Any, grant: str) -> tuple[int, str]:
    connector = aiohttp.TCPConnector(ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session, \
            session.get(f"{url}{API_PREFIX}{rpc_tunnel_path(grant)}") as resp:
        return resp.status, (await resp.json(content_type=None))["error"]["code"]


def stranger_context(tmp_path: Path, ca: CertificateAuthority) -> Any:
    """Another node's agent: its certificate signed by the same CA, no grant names it."""
    paths = AgentPaths(tmp_path / "stranger").ensure()
    identity = load_or_create_identity(paths)
    paths.cert_file.write_bytes(cert_pem(ca.sign(identity.key.public_key(), "stranger", server=True, client=True)))
    paths.ca_file.write_bytes(cert_pem(ca.cert))
    return peer_client_context(load_or_create_identity(paths))


def refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


async def test_a_model_split_over_two_agents_on_loopback_answers(
        tmp_path: Path, daemonish: Daemonish, main_agent: tuple[InProcessAgent, AgentClient, str],
        real_llama_server: Path, gemma_gguf: Path) -> None:
    main, main_client, main_node = main_agent
    helper = await start_inprocess_agent(tmp_path / "helper", name="helper", llama_server=real_llama_server)
    try:
        paired = await helper.pair_with(daemonish.ca, daemonish.cert.read_text())
        helper_client = daemonish.client(helper.url, paired.certificate_pem)
        try:
            _answer, port = await run_split(main_client, main.home, helper_client, helper.url, paired.node_id,
                                            main_node, gemma_gguf)
            rpc_log = (helper.home / "logs" / f"rpc-{GRANT}.log").read_text(errors="replace")
            # one connection is the agent asking whether it listens; the others are the main node's
            assert rpc_log.count("Accepted client connection") >= 2, rpc_log[-2000:]
            assert await tunnel_refusal(helper.url, stranger_context(tmp_path, daemonish.ca), GRANT) == \
                (403, "grant_not_open")

            # The helper's grant closes under the running model: its RPC breaks, the model fails
            # (with llama-server's reason) instead of answering from half a model.
            assert (await helper_client.stop_rpc_server(GRANT)).state is RpcServerState.STOPPED
            assert refused("127.0.0.1", port)
            body = {"model": "gemma-split", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi."}]}
            async with main_client.session.post(main_client.proxy_url("split", "/v1/chat/completions"),
                                                json=body) as resp:
                assert resp.status != 200
            failed = await eventually(lambda: _in(main_client, InstanceState.FAILED), timeout=60,
                                      what="the model to fail")
            assert failed.error, failed
        finally:
            await helper_client.close()
    finally:
        await helper.close()


@pytest.mark.netns
async def test_a_model_split_with_a_helper_on_its_own_wire_keeps_rpc_off_the_network(
        tmp_path: Path, daemonish: Daemonish, main_agent: tuple[InProcessAgent, AgentClient, str],
        netns: Any, agents: Any, real_llama_server: Path, gemma_gguf: Path) -> None:
    main, main_client, main_node = main_agent
    ns = netns()
    helper = await agents("helper", host=ns.ns_ip, port=9443, netns=ns.name, llama_server=real_llama_server)
    pairing = await helper.wait_event("pairing")  # it follows "listening"; under load not at once
    paired = await pair(ns.ns_ip, 9443, pairing["code"], pairing["fingerprint"], daemonish.ca,
                        daemonish.cert.read_text())
    await helper.wait_event("listening", paired=True)
    helper_url = f"https://{ns.ns_ip}:9443"
    helper_client = daemonish.client(helper_url, paired.certificate_pem)
    try:
        _answer, port = await run_split(main_client, main.home, helper_client, helper_url, paired.node_id,
                                        main_node, gemma_gguf)
        rpc_log = (helper.home / "logs" / f"rpc-{GRANT}.log").read_text(errors="replace")
        assert rpc_log.count("Accepted client connection") >= 2, rpc_log[-2000:]  # the probe, then the main
        # The rpc-server listens on the helper's own 127.0.0.1: from this machine (the main's) it is
        # not there at all; the only way in is the tunnel, and not for a node the grant does not name.
        assert refused(ns.ns_ip, port)
        assert await tunnel_refusal(helper_url, stranger_context(tmp_path, daemonish.ca), GRANT) == \
            (403, "grant_not_open")
        assert await tunnel_refusal(helper_url, peer_client_context(main.deps[-1].identity), "split-other-0002") \
            == (403, "grant_not_open")
        await main_client.stop("split", timeout=10)
        assert (await helper_client.stop_rpc_server(GRANT)).state is RpcServerState.STOPPED
    finally:
        await helper_client.close()
