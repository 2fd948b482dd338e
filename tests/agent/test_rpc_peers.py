"""llama.cpp RPC between agents (agent.rpc): who reaches what, over real mutual TLS on loopback.

Two paired agents (same CA, each pinning the daemon's certificate) and a third CA-signed agent
certificate. The daemon reaches every route; another node's agent reaches only the RPC tunnel of
a grant naming its node id; the tunnel carries bytes to the helper's rpc-server (here a fake that
echoes, bound where the agent tells it) and ends when the grant closes. The main node's forwards
refuse a helper whose certificate is not the node id the launch spec names.
"""

from __future__ import annotations

import asyncio
import socket
import stat
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from agent.api.client import AgentClient, AgentError
from agent.api.launch_policy import PolicyViolation, check_env, check_extra_args
from agent.api.models import API_PREFIX
from agent.api.rpc import RpcPeer, RpcServerRequest, RpcServerState, rpc_tunnel_path
from agent.deps import AgentDeps, build_deps
from agent.identity import AgentIdentity, load_or_create_identity, make_csr
from agent.pairing.enrollment import install_enrollment, paired_ssl_context
from agent.paths import AgentPaths
from agent.records import ProcessRecords
from agent.rpc.forwards import RpcForwards, peer_client_context
from agent.rpc.peers import PeerPolicy
from agent.server import create_app, start_server
from daemon.nodes.store import node_ssl_context
from daemon.pki import CertificateAuthority, cert_pem
from daemon.tls import ensure_client_certificate
from tests.agent._support import eventually
from tests.fakes import FakeGpuProbe, write_fake_runtime
from tests.fakes.fake_memory import FakeMemoryProbe, GiB

FAKE_RPC_SERVER = Path(__file__).resolve().parents[1] / "fakes" / "fake_rpc_server.py"


def write_fake_rpc_server(directory: Path) -> Path:
    """A ``ggml-rpc-server`` beside the fake llama-server (where the catalog looks for it)."""
    path = directory / "ggml-rpc-server"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_RPC_SERVER} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@dataclass
class Node:
    name: str
    deps: AgentDeps
    identity: AgentIdentity
    url: str
    cert_pem: str
    daemon: AgentClient  # the daemon's client for this node (its pinned certificate)

    @property
    def node_id(self) -> str:
        return self.identity.node_id


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.load_or_create(tmp_path / "pki")


@pytest.fixture
async def nodes(tmp_path: Path, ca: CertificateAuthority) -> AsyncIterator[Callable[..., Any]]:
    """``await nodes("helper", rpc=True)``: a paired agent serving mutual TLS on loopback."""
    key, cert = ensure_client_certificate(ca, tmp_path / "pki")
    cleanups: list[Callable[[], Any]] = []

    async def start(name: str, *, rpc: bool = True, available: int = 12 * GiB) -> Node:
        bin_dir = tmp_path / f"bin-{name}"
        exe = write_fake_runtime(bin_dir)
        if rpc:
            write_fake_rpc_server(bin_dir)
        paths = AgentPaths(tmp_path / name).ensure()
        identity = load_or_create_identity(paths)
        agent_pem = cert_pem(ca.sign_csr(make_csr(identity))).decode()
        identity = install_enrollment(paths, cert_pem(ca.cert).decode(), agent_pem, cert.read_text())
        deps = build_deps(paths.home, llama_server=exe, gpu_probe=FakeGpuProbe(), adopt_on_start=False,
                          memory_probe=FakeMemoryProbe(available=available))
        runner, port = await start_server(create_app(deps), "127.0.0.1", 0, paired_ssl_context(identity))
        url = f"https://127.0.0.1:{port}"
        daemon = AgentClient(url, node_ssl_context(agent_pem, cert, key))

        async def cleanup() -> None:
            await daemon.close()
            await runner.cleanup()

        cleanups.append(cleanup)
        return Node(name, deps, identity, url, agent_pem, daemon)

    yield start
    for cleanup in reversed(cleanups):
        await cleanup()


def grant(peer: Node, grant_id: str = "grant-0001", **kw: Any) -> RpcServerRequest:
    return RpcServerRequest(grant_id=grant_id, peer_node_id=peer.node_id, **kw)


def tunnel(node: Node, grant_id: str) -> str:
    return f"{node.url}{API_PREFIX}{rpc_tunnel_path(grant_id)}"


async def refusal(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    """A plain GET of a tunnel route: the status and the error code of the agent's answer."""
    async with session.get(url) as resp:
        body = await resp.json(content_type=None)
        return resp.status, body["error"]["code"]


async def echo(ws: aiohttp.ClientWebSocketResponse, data: bytes) -> bytes:
    await ws.send_bytes(data)
    got = b""
    while len(got) < len(data):
        msg = await asyncio.wait_for(ws.receive(), 10)
        assert msg.type == aiohttp.WSMsgType.BINARY, msg
        got += msg.data
    return got


async def test_another_nodes_agent_reaches_only_the_tunnel_of_a_grant_naming_it(nodes: Any) -> None:
    helper, main, stranger = await nodes("helper"), await nodes("main"), await nodes("stranger")
    status = await helper.daemon.status()
    assert status.rpc_server is not None and status.rpc_server.endswith("ggml-rpc-server")
    info = await helper.daemon.start_rpc_server(grant(main))
    assert info.state is RpcServerState.READY and info.port is not None

    as_main = AgentClient(helper.url, peer_client_context(main.identity))
    try:
        for call in (as_main.status, as_main.rpc_servers, lambda: as_main.start_rpc_server(grant(main, "grant-0002")),
                     lambda: as_main.stop_rpc_server("grant-0001"), as_main.instances):
            with pytest.raises(AgentError) as refused:
                await call()
            assert (refused.value.status, refused.value.code) == (403, "peer_not_allowed")
        assert [s.grant_id for s in await helper.daemon.rpc_servers()] == ["grant-0001"]  # nothing opened

        ws = await as_main.session.ws_connect(tunnel(helper, "grant-0001"))
        try:
            assert await echo(ws, b"\x00hello rpc" * 1000) == b"\x00hello rpc" * 1000
        finally:
            await ws.close()
        assert (await refusal(as_main.session, tunnel(helper, "grant-0404"))) == (403, "grant_not_open")
    finally:
        await as_main.close()

    as_stranger = AgentClient(helper.url, peer_client_context(stranger.identity))
    try:  # signed by the same CA, but the grant names another node
        assert (await refusal(as_stranger.session, tunnel(helper, "grant-0001"))) == (403, "grant_not_open")
        with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
            await as_stranger.session.ws_connect(tunnel(helper, "grant-0001"))
        assert handshake.value.status == 403
    finally:
        await as_stranger.close()
    # The daemon reaches everything but the tunnel: only the grant's node carries RPC.
    assert (await refusal(helper.daemon.session, tunnel(helper, "grant-0001"))) == (403, "grant_not_open")


async def test_closing_a_grant_ends_its_tunnels_and_its_rpc_server(nodes: Any) -> None:
    helper, main = await nodes("helper"), await nodes("main")
    info = await helper.daemon.start_rpc_server(grant(main, threads=2))
    assert info.pid is not None
    again = await helper.daemon.start_rpc_server(grant(main, threads=2))  # the open grant, as it is
    assert (again.pid, again.port) == (info.pid, info.port)
    log = helper.deps.paths.logs_dir / "rpc-grant-0001.log"
    await eventually(lambda: "listening on 127.0.0.1:" in log.read_text(), what="the rpc-server's log")
    assert f"-H 127.0.0.1 -p {info.port} -t 2" in log.read_text()  # loopback only, as asked

    as_main = AgentClient(helper.url, peer_client_context(main.identity))
    try:
        ws = await as_main.session.ws_connect(tunnel(helper, "grant-0001"))
        assert await echo(ws, b"ping") == b"ping"
        stopped = await helper.daemon.stop_rpc_server("grant-0001")
        assert stopped.state is RpcServerState.STOPPED
        msg = await asyncio.wait_for(ws.receive(), 10)  # the open tunnel ends with the grant
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
        await ws.close()
        assert (await refusal(as_main.session, tunnel(helper, "grant-0001"))) == (403, "grant_not_open")
    finally:
        await as_main.close()
    assert not psutil.pid_exists(info.pid) or psutil.Process(info.pid).status() == psutil.STATUS_ZOMBIE
    assert (await helper.daemon.rpc_server("grant-0001")).state is RpcServerState.STOPPED
    with pytest.raises(AgentError) as unknown:
        await helper.daemon.stop_rpc_server("grant-9999")
    assert (unknown.value.status, unknown.value.code) == (404, "grant_not_found")


def _recorded_rpc(paths: AgentPaths) -> list[int]:
    """The rpc-servers' PIDs in ``processes.json`` (the part a later agent stops, never adopts)."""
    return [r.pid for r in ProcessRecords(paths.records_file).load(rpc=True).values()]


async def test_an_rpc_server_that_dies_fails_its_grant_and_leaves_the_records(nodes: Any) -> None:
    helper, main = await nodes("helper"), await nodes("main")
    info = await helper.daemon.start_rpc_server(grant(main))
    assert info.pid is not None and _recorded_rpc(helper.deps.paths) == [info.pid]
    psutil.Process(info.pid).kill()
    failed = await eventually(lambda: _state_is(helper, RpcServerState.FAILED), what="the grant failed")
    assert failed.error and "ggml-rpc-server" in failed.error and failed.last_log_lines
    as_main = AgentClient(helper.url, peer_client_context(main.identity))
    try:
        assert (await refusal(as_main.session, tunnel(helper, "grant-0001"))) == (403, "grant_not_open")
    finally:
        await as_main.close()
    assert _recorded_rpc(helper.deps.paths) == []
    assert (await helper.daemon.stop_rpc_server("grant-0001")).state is RpcServerState.STOPPED  # acknowledged
    again = await helper.daemon.start_rpc_server(grant(main))  # the grant opens anew
    assert again.state is RpcServerState.READY and again.pid not in (None, info.pid)


async def _state_is(node: Node, state: RpcServerState) -> Any:
    info = await node.daemon.rpc_server("grant-0001")
    return info if info.state is state else None


async def test_the_next_agent_stops_an_rpc_server_left_running_and_adopts_nothing(nodes: Any,
                                                                                    tmp_path: Path) -> None:
    helper, main = await nodes("helper"), await nodes("main")
    info = await helper.daemon.start_rpc_server(grant(main))
    assert info.pid is not None
    # Another agent on the same home, as after this one was killed outright: adoption on.
    deps = build_deps(helper.deps.paths.home, llama_server=write_fake_runtime(tmp_path / "bin-next"),
                      gpu_probe=FakeGpuProbe(), memory_probe=FakeMemoryProbe(available=12 * GiB))
    runner, _port = await start_server(create_app(deps), "127.0.0.1", 0, None)
    try:
        assert not psutil.pid_exists(info.pid) or psutil.Process(info.pid).status() == psutil.STATUS_ZOMBIE
        assert deps.manager.page().instances == [] and deps.rpc is not None and deps.rpc.list() == []
        assert _recorded_rpc(deps.paths) == []
    finally:
        await runner.cleanup()


async def test_the_rpc_port_takes_no_connection_from_another_address(nodes: Any) -> None:
    helper, main = await nodes("helper"), await nodes("main")
    info = await helper.daemon.start_rpc_server(grant(main))
    assert info.port is not None
    others = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    if not others:
        pytest.skip("this machine has no address but loopback")
    with pytest.raises(ConnectionRefusedError), socket.create_connection((others[0], info.port), timeout=5):
        pass


async def test_a_grant_more_than_the_node_has_free_is_refused(nodes: Any) -> None:
    helper, main = await nodes("helper", available=2 * GiB), await nodes("main")
    with pytest.raises(AgentError) as refused:
        await helper.daemon.start_rpc_server(grant(main, memory_bytes=3 * GiB))
    assert (refused.value.status, refused.value.code) == (409, "insufficient_memory")
    assert "2.0 GiB free in system memory" in refused.value.message
    assert refused.value.details["wanted_bytes"] == 3 * GiB
    assert await helper.daemon.rpc_servers() == []
    fits = await helper.daemon.start_rpc_server(grant(main, memory_bytes=1 * GiB))
    assert fits.state is RpcServerState.READY and fits.memory_bytes == 1 * GiB


async def test_a_node_without_ggml_rpc_server_says_so(nodes: Any) -> None:
    helper, main = await nodes("helper", rpc=False), await nodes("main")
    assert (await helper.daemon.status()).rpc_server is None
    with pytest.raises(AgentError) as refused:
        await helper.daemon.start_rpc_server(grant(main))
    assert (refused.value.status, refused.value.code) == (503, "no_rpc_server")
    with pytest.raises(AgentError) as bad:
        await helper.daemon._call("POST", "/rpc/servers", body={"grant_id": "x", "peer_node_id": "nope"})
    assert (bad.value.status, bad.value.code) == (422, "invalid_request")


async def _through(port: int, data: bytes) -> bytes:
    """Send ``data`` into a forward and read until it comes back or the forward closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    got = b""
    while len(got) < len(data):
        chunk = await asyncio.wait_for(reader.read(65536), 10)
        if not chunk:
            break
        got += chunk
    writer.close()
    return got


async def test_the_main_nodes_forwards_go_only_to_the_helper_the_spec_names(nodes: Any) -> None:
    helper, main = await nodes("helper"), await nodes("main")
    await helper.daemon.start_rpc_server(grant(main))
    forwards = RpcForwards(lambda: peer_client_context(main.identity))
    right = RpcPeer(agent_url=helper.url, grant_id="grant-0001", node_id=helper.node_id)
    impostor = RpcPeer(agent_url=helper.url, grant_id="grant-0001", node_id=main.node_id)
    no_grant = RpcPeer(agent_url=helper.url, grant_id="grant-0404", node_id=helper.node_id)
    try:
        opened = forwards.open("split", [right, impostor, no_grant])
        ports = [int(e.rsplit(":", 1)[1]) for e in opened.endpoints]
        assert all(e.startswith("127.0.0.1:") for e in opened.endpoints)
        payload = bytes(range(256)) * 4096  # 1 MiB: several frames each way
        assert await _through(ports[0], payload) == payload
        assert await _through(ports[1], b"secret") == b""  # another certificate: dropped, nothing sent
        assert await _through(ports[2], b"secret") == b""  # no open grant: refused by the helper
        await opened.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", ports[0])
    finally:
        await forwards.close_all()


def _der(pem: str) -> bytes:
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(Encoding.DER)


def test_who_is_the_daemon(tmp_path: Path, ca: CertificateAuthority) -> None:
    _key, daemon_cert = ensure_client_certificate(ca, tmp_path / "pki")
    daemon = _der(daemon_cert.read_text())
    _k, agent_cert = ca.issue_keypair(tmp_path, "agent", "node-b", server=True, client=True)
    agent = _der(agent_cert.read_text())
    _k2, other_client = ca.issue_keypair(tmp_path, "other", "someone", server=False, client=True)
    other = _der(other_client.read_text())

    pinned = PeerPolicy(daemon)
    assert pinned.classify(daemon).daemon
    assert not pinned.classify(other).daemon  # the same CA, not the pinned certificate
    peer = pinned.classify(agent)
    assert not peer.daemon and peer.node_id is not None and len(peer.node_id) == 64
    unpinned = PeerPolicy(None)  # this machine's agent: the daemon's certificate has no server use
    assert unpinned.classify(daemon).daemon and unpinned.classify(other).daemon
    assert not unpinned.classify(agent).daemon
    assert PeerPolicy(daemon).classify(None).daemon  # served without TLS: tests only


def test_a_launch_may_not_pass_rpc_itself() -> None:
    with pytest.raises(PolicyViolation):
        check_extra_args(["--rpc", "10.0.0.2:50052"], "/m/g.gguf")
    with pytest.raises(PolicyViolation):
        check_env({"LLAMA_ARG_RPC": "10.0.0.2:50052"})


def test_an_agent_certificate_is_a_client_certificate_too(tmp_path: Path, ca: CertificateAuthority) -> None:
    identity = load_or_create_identity(AgentPaths(tmp_path / "a").ensure())
    signed = ca.sign_csr(make_csr(identity))
    usages = signed.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usages and x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usages
