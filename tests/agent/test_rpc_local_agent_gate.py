"""This machine's agent pins no daemon certificate (the daemon writes its identity directly): it
tells the daemon from another node by the certificate's use alone. Over real mutual TLS, another
node's agent certificate (server and client use, the same CA) reaches none of its routes but a
grant's tunnel, and a certificate of another CA does not get through the handshake."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest

from agent.api.client import AgentClient, AgentError
from agent.deps import build_deps
from agent.identity import load_or_create_identity, make_csr, server_ssl_context
from agent.paths import AgentPaths
from agent.rpc.forwards import peer_client_context
from agent.server import create_app, start_server
from daemon.nodes.store import node_ssl_context
from daemon.pki import CertificateAuthority, cert_pem
from daemon.tls import ensure_client_certificate, ensure_local_agent_identity
from tests.fakes import FakeGpuProbe
from tests.fakes.fake_memory import FakeMemoryProbe


async def test_the_local_agent_answers_another_nodes_certificate_only_on_a_tunnel(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    key, cert = ensure_client_certificate(ca, tmp_path / "pki")
    ensure_local_agent_identity(ca, tmp_path / "local" / "identity")
    local = load_or_create_identity(AgentPaths(tmp_path / "local").ensure())
    other_paths = AgentPaths(tmp_path / "other").ensure()
    other = load_or_create_identity(other_paths)
    other_paths.cert_file.write_text(cert_pem(ca.sign_csr(make_csr(other))).decode())
    other_paths.ca_file.write_bytes(cert_pem(ca.cert))
    other = load_or_create_identity(other_paths)
    stranger_ca = CertificateAuthority.load_or_create(tmp_path / "stranger-pki")
    s_key, s_cert = ensure_client_certificate(stranger_ca, tmp_path / "stranger-pki")

    deps = build_deps(tmp_path / "local", gpu_probe=FakeGpuProbe([]), adopt_on_start=False,
                      memory_probe=FakeMemoryProbe())
    runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(local))
    url = f"https://127.0.0.1:{port}"
    agent_pem = local.paths.cert_file.read_text()
    daemon = AgentClient(url, node_ssl_context(agent_pem, cert, key))
    peer = AgentClient(url, peer_client_context(other))
    stranger = AgentClient(url, node_ssl_context(agent_pem, s_cert, s_key))
    try:
        await daemon.status()  # the daemon reaches it
        for call in (peer.status, peer.instances, peer.rpc_servers, lambda: peer.stop_rpc_server("grant-0001")):
            with pytest.raises(AgentError) as refused:
                await call()
            assert (refused.value.status, refused.value.code) == (403, "peer_not_allowed")
        async with peer.session.get(f"{url}/agent/v1/rpc/grant-0001/tunnel") as resp:
            assert resp.status == 403 and (await resp.json())["error"]["code"] == "grant_not_open"
        with pytest.raises((AgentError, aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await stranger.status()  # another CA: no handshake
    finally:
        for client in (daemon, peer, stranger):
            await client.close()
        await runner.cleanup()
