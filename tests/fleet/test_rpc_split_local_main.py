"""The most common split: the daemon's own machine is the main node and lends a second machine's
memory. The daemon's local agent (its child, on 127.0.0.1 only) runs the real Gemma 3 270M on
the real llama-server with half its layers on a helper agent in a network namespace (its real
ggml-rpc-server), through the helper's mutual-TLS tunnel.

The local agent's certificate here is one from before agents could be clients (server use only),
as an older install left it: the daemon issues it again on start, and the helper's grant names
the new certificate's id, the one the local agent presents at the tunnel. A chat completion
through the daemon's /v1 answers; stopping the model stops the helper's rpc-server.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from agent.api.models import IDENTITY_CERT_FILE
from agent.api.rpc import RpcServerState
from daemon.api.models import ModelState
from daemon.paths import DaemonPaths
from daemon.pki import CertificateAuthority
from tests.daemon.harness import model, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.test_rpc_split_real import (  # noqa: F401
    HALF_OF_GEMMA,
    MONITOR,
    _refused,
    rpc_llama_server,
)

pytestmark = [pytest.mark.e2e, pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(600)]


def _server_only_local_certificate(home: Path) -> bytes:
    """What an install from before left: the daemon's CA and a local agent certificate without client use."""
    paths = DaemonPaths(home)
    paths.ensure()
    ca = CertificateAuthority.load_or_create(paths.pki)
    identity = paths.local_agent_home / "identity"
    identity.mkdir(parents=True, exist_ok=True)
    _key, cert = ca.issue_keypair(identity, "agent", "mirbadllm-local-agent", server=True, client=False,
                                  hosts=["127.0.0.1", "localhost", "::1"])
    return cert.read_bytes()


async def test_this_machine_is_the_main_node_of_a_model_across_nodes(
        netns: Any, agents: Any, tmp_path: Path, rpc_llama_server: Path, gemma_gguf: Path) -> None:  # noqa: F811
    ns = netns()
    helper = await agents("helper", host=ns.ns_ip, port=9443, netns=ns.name, llama_server=rpc_llama_server)
    home = tmp_path / "daemon"
    old_pem = _server_only_local_certificate(home)
    async with running_daemon(home, rpc_llama_server, nodes=MONITOR) as rd:
        pem = (DaemonPaths(home).local_agent_home / "identity" / IDENTITY_CERT_FILE).read_bytes()
        cert = x509.load_pem_x509_certificate(pem)
        assert pem != old_pem, "the old certificate without client use was issued again"
        assert ExtendedKeyUsageOID.CLIENT_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        local_id = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
        assert (await rd.daemon.links["local"].client.status()).node_id == local_id, "the agent runs with it"

        pairing = helper.last("pairing")
        helper_id = (await rd.client.pair_node(helper.address, pairing["code"], pairing["fingerprint"])).id
        helper_link = rd.daemon.links[helper_id]
        await eventually(lambda: rd.daemon.nodes.lends(helper_id), timeout=30, what="the helper's rpc-server known")

        definition = model("gemma-here", str(gemma_gguf), node="local", rpc_nodes=["helper"],
                           settings={"ctx_size": 1024, "n_gpu_layers": HALF_OF_GEMMA}, startup_timeout_s=240)
        saved = (await rd.client.create_model(definition)).definition
        assert (saved.node, saved.rpc_nodes) == ("local", [helper_id])

        ready = await rd.client.start_model("gemma-here", wait=True)
        assert ready.state == ModelState.READY, (ready.error, ready.last_log_lines)
        assert [(h.node, h.state) for h in ready.rpc_helpers] == [(helper_id, "ready")]
        (server,) = await helper_link.client.rpc_servers()
        assert (server.state, server.peer_node_id) == (RpcServerState.READY, local_id), \
            "the grant names the local agent's certificate"
        assert await _refused("127.0.0.1", server.port)  # type: ignore[arg-type]
        assert await _refused(ns.ns_ip, server.port)  # type: ignore[arg-type]

        client = openai.AsyncOpenAI(base_url=rd.v1, api_key="unused", max_retries=0, timeout=120)
        answer = await client.chat.completions.create(
            model="gemma-here", messages=[{"role": "user", "content": "Say hello in one word."}], max_tokens=8)
        await client.close()
        assert answer.choices[0].message.content, answer
        (log,) = helper.home.rglob(f"*{server.grant_id}*.log")
        assert "Accepted client connection" in log.read_text(encoding="utf-8", errors="replace"), \
            "the local llama-server reached the helper's rpc-server through the tunnel"

        stopped = await rd.client.stop_model("gemma-here")
        assert stopped.state == ModelState.STOPPED
        left = [s for s in await helper_link.client.rpc_servers() if s.state == RpcServerState.READY]
        assert left == [], "the helper's rpc-server stops with the model"
