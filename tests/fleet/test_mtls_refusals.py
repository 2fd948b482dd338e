"""Mutual TLS between the daemon and a paired agent refuses everything but the pinned pair.

Agent side: no client certificate, one from another CA, an expired one, TLS 1.2 fail the
handshake; one this CA signed for someone else (another node's agent may reach a grant's RPC
tunnel, ``agent.rpc.peers``) gets a 403 on every other route. Daemon side: a node's pinned context refuses another node's certificate
(same CA) and an expired node certificate. And the pairing routes are gone once paired.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.pairing import PairingClient
from agent.deps import build_deps
from agent.identity import load_or_create_identity, make_csr
from agent.pairing.enrollment import install_enrollment, paired_ssl_context
from agent.paths import AgentPaths
from agent.server import create_app, start_server
from daemon.nodes.store import node_ssl_context
from daemon.pki import CertificateAuthority, cert_pem, key_pem, new_key
from daemon.tls import ensure_client_certificate
from tests.fakes import FakeGpuProbe
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent

PAST = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)


def client_context(trust_pem: str, cert: Path | None, key: Path | None,
                   tls12: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cadata=trust_pem)
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def write_pair(directory: Path, stem: str, key: object, cert: object) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{stem}.key").write_bytes(key_pem(key))  # type: ignore[arg-type]
    (directory / f"{stem}.crt").write_bytes(cert_pem(cert))  # type: ignore[arg-type]
    return directory / f"{stem}.crt", directory / f"{stem}.key"


async def refused(url: str, ctx: ssl.SSLContext) -> AgentError:
    client = AgentClient(url, ctx)
    try:
        with pytest.raises(AgentError) as caught:
            await client.status()
    finally:
        await client.close()
    assert caught.value.status == 0  # no HTTP answer at all: the handshake failed
    return caught.value


async def forbidden(url: str, ctx: ssl.SSLContext) -> AgentError:
    """Through the handshake (a certificate the CA signed), then refused: not the daemon."""
    client = AgentClient(url, ctx)
    try:
        for call in (client.status, client.instances, client.telemetry):
            with pytest.raises(AgentError) as caught:
                await call()
            assert (caught.value.status, caught.value.code) == (403, "peer_not_allowed")
    finally:
        await client.close()
    return caught.value


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.load_or_create(tmp_path / "pki")


@pytest.fixture
async def paired(tmp_path: Path, ca: CertificateAuthority) -> AsyncIterator[tuple[InProcessAgent, str]]:
    """An agent paired through the real protocol; (agent, its signed certificate)."""
    _key, cert = ensure_client_certificate(ca, tmp_path / "pki")
    agent = await start_inprocess_agent(tmp_path / "agent", name="delta")
    try:
        result = await agent.pair_with(ca, cert.read_text())
        yield agent, result.certificate_pem
    finally:
        await agent.close()


async def test_only_the_pinned_daemon_certificate_gets_in(paired: tuple[InProcessAgent, str], ca: CertificateAuthority,
                                                          tmp_path: Path) -> None:
    agent, node_pem = paired
    key, cert = tmp_path / "pki" / "daemon-client.key", tmp_path / "pki" / "daemon-client.crt"
    ok = AgentClient(agent.url, node_ssl_context(node_pem, cert, key))
    try:
        assert (await ok.status()).node_id == agent.last("paired")["node_id"]
    finally:
        await ok.close()

    await refused(agent.url, client_context(node_pem, None, None))  # no client certificate
    other_ca = CertificateAuthority.load_or_create(tmp_path / "other-pki", name="Another CA")
    foreign = other_ca.issue_keypair(tmp_path / "other", "client", "mirbadllm-daemon", server=False, client=True)
    await refused(agent.url, client_context(node_pem, foreign[1], foreign[0]))  # another CA
    # Signed by the very same CA, but not the daemon certificate the agent learned while pairing:
    # another node's agent reaches only a grant's RPC tunnel, nothing a daemon does.
    same_ca = ca.issue_keypair(tmp_path / "same", "client", "mirbadllm-daemon", server=False, client=True)
    await forbidden(agent.url, client_context(node_pem, same_ca[1], same_ca[0]))
    other_agent = ca.issue_keypair(tmp_path / "node", "agent", "node-b", server=True, client=True)
    await forbidden(agent.url, client_context(node_pem, other_agent[1], other_agent[0]))
    k = new_key()
    expired = write_pair(tmp_path / "expired", "client",
                         k, ca.sign(k.public_key(), "mirbadllm-daemon", server=False, client=True,
                                    not_before=PAST, days=1))
    await refused(agent.url, client_context(node_pem, expired[0], expired[1]))
    await refused(agent.url, client_context(node_pem, cert, key, tls12=True))  # TLS 1.3 only

    pairing = PairingClient(agent.url, agent.last("listening")["node_id"])  # the pairing routes are gone
    try:
        with pytest.raises(AgentError) as gone:
            await pairing.info()
        assert gone.value.status == 0
    finally:
        await pairing.close()


async def test_an_expired_pinned_daemon_certificate_is_refused(tmp_path: Path, ca: CertificateAuthority) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    identity = load_or_create_identity(paths)
    agent_pem = cert_pem(ca.sign_csr(make_csr(identity))).decode()
    k = new_key()
    old = ca.sign(k.public_key(), "mirbadllm-daemon", server=False, client=True, not_before=PAST, days=1)
    old_files = write_pair(tmp_path / "old", "client", k, old)
    identity = install_enrollment(paths, cert_pem(ca.cert).decode(), agent_pem, cert_pem(old).decode())
    deps = build_deps(paths.home, gpu_probe=FakeGpuProbe(), adopt_on_start=False)
    runner, port = await start_server(create_app(deps), "127.0.0.1", 0, paired_ssl_context(identity))
    try:
        await refused(f"https://127.0.0.1:{port}", client_context(agent_pem, old_files[0], old_files[1]))
    finally:
        await runner.cleanup()


async def test_the_daemon_refuses_another_nodes_and_expired_node_certificates(
        tmp_path: Path, ca: CertificateAuthority) -> None:
    key, cert = ensure_client_certificate(ca, tmp_path / "pki")
    servers = {}
    for name, past in (("node-a", False), ("node-b", False), ("node-old", True)):
        paths = AgentPaths(tmp_path / name).ensure()
        identity = load_or_create_identity(paths)
        signed = ca.sign_csr(make_csr(identity)) if not past else ca.sign(
            identity.key.public_key(), name, server=True, client=False, not_before=PAST, days=1)
        identity = install_enrollment(paths, cert_pem(ca.cert).decode(), cert_pem(signed).decode(), cert.read_text())
        deps = build_deps(paths.home, gpu_probe=FakeGpuProbe(), adopt_on_start=False)
        runner, port = await start_server(create_app(deps), "127.0.0.1", 0, paired_ssl_context(identity))
        servers[name] = (runner, f"https://127.0.0.1:{port}", cert_pem(signed).decode())
    try:
        _, url_a, pem_a = servers["node-a"]
        _, url_b, _ = servers["node-b"]
        good = AgentClient(url_a, node_ssl_context(pem_a, cert, key))
        try:
            await good.status()
        finally:
            await good.close()
        # Node B's certificate is signed by our CA too, but the link to A pins A's certificate.
        error = await refused(url_b, node_ssl_context(pem_a, cert, key))
        assert "certificate" in error.message.lower()
        _, url_old, pem_old = servers["node-old"]
        error = await refused(url_old, node_ssl_context(pem_old, cert, key))
        assert "expired" in error.message
    finally:
        for runner, _url, _pem in servers.values():
            await runner.cleanup()


async def test_an_unpaired_agent_exposes_only_the_pairing_routes(tmp_path: Path) -> None:
    agent = await start_inprocess_agent(tmp_path / "agent", name="epsilon")
    try:
        fp = agent.last("listening")["node_id"]
        assert agent.last("pairing")["fingerprint"] == fp
        assert any("Pairing code:" in line and agent.last("pairing")["code"] in line for line in agent.banner)
        pairing = PairingClient(agent.url, fp)
        try:
            info = await pairing.info()
            assert (info.name, info.fingerprint) == ("epsilon", fp) and 0 < info.code_expires_in_s <= 600
            with pytest.raises(AgentError) as not_here:
                await pairing._call("GET", "/status")
            assert (not_here.value.status, not_here.value.code) == (404, "not_paired")
        finally:
            await pairing.close()
        impostor = PairingClient(agent.url, "ab" * 32)  # the user compared another fingerprint
        try:
            with pytest.raises(AgentError) as mismatch:
                await impostor.info()
            assert mismatch.value.code == "fingerprint_mismatch"
        finally:
            await impostor.close()
    finally:
        await agent.close()
