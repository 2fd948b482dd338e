"""CA rotation with real agents over mutual TLS (in the test's loop): both switch to a new CA while a
model keeps answering, the old CA is refused afterwards, an offline node is named and paired again,
a failed switch retires nothing, and a rotation asked while a node is being paired is refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from agent.api.client import AgentClient, AgentError
from agent.api.trust import TrustUpdate
from agent.pairing.enrollment import reset_identity
from agent.paths import AgentPaths
from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from daemon.api.nodes import NodeState
from daemon.nodes.ca_files import PENDING_CA_DIR, finish_interrupted_retirement
from daemon.pki import CertificateAuthority, cert_pem, fingerprint
from daemon.tls import client_ssl_context, ensure_client_certificate
from mirbadllm import ctl, ctl_nodes
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, pair_online, start_inprocess_agent

pytestmark = pytest.mark.slow

# A stopped agent is offline within a second; a slow answer on a busy machine is not mistaken for one.
MONITOR = {"interval_s": 0.5, "probe_timeout_s": 5.0, "offline_after": 2}


@pytest.fixture
async def rd(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=MONITOR) as running:
        yield running


@pytest.fixture
async def two(tmp_path: Path, rd: RunningDaemon, runtime_exe: Path) -> AsyncIterator[list[InProcessAgent]]:
    started = [await start_inprocess_agent(tmp_path / name, name=name, llama_server=runtime_exe)
               for name in ("alpha", "beta")]
    yield started
    for agent in started:
        await agent.close()


def _old_client(rd: RunningDaemon) -> ssl.SSLContext:
    """What a client holding the daemon's CA and client certificate of now has (loaded now)."""
    pki = rd.daemon.paths.pki
    return client_ssl_context(pki / "ca.crt", pki / "daemon-client.key", pki / "daemon-client.crt")


async def _chat(rd: RunningDaemon, served: str) -> str:
    body = {"model": served, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session, session.post(f"{rd.v1}/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return str(json.loads(await resp.text())["model"])


async def _states(rd: RunningDaemon) -> dict[str, NodeState]:
    return {n.name: n.state for n in await rd.client.list_nodes()}


async def test_two_agents_switch_to_a_new_ca_and_the_old_one_is_refused(
        rd: RunningDaemon, two: list[InProcessAgent], model_file: Path) -> None:
    ids = [await pair_online(rd, agent) for agent in two]
    await rd.client.create_model(model("served", str(model_file), node=ids[0]))
    assert (await rd.client.start_model("served", wait=True)).state == ModelState.READY
    old_ca = (rd.daemon.paths.pki / "ca.crt").read_bytes()
    old_client = _old_client(rd)

    began = time.perf_counter()
    result = await rd.client.rotate_ca()
    print(f"\nCA rotation across two agents: {time.perf_counter() - began:.3f} s (daemon: {result.seconds} s; "
          + ", ".join(f"{n.name} {n.seconds} s" for n in result.nodes) + ")")

    assert result.retired and result.problem is None and result.offline == []
    assert {n.name: n.outcome for n in result.nodes} == {"alpha": "rotated", "beta": "rotated"}
    assert (rd.daemon.paths.pki / "ca.crt").read_bytes() != old_ca
    assert result.new_ca == fingerprint(x509.load_pem_x509_certificate((rd.daemon.paths.pki / "ca.crt").read_bytes()))
    # The nodes keep their ids and answer over the new CA; the model on alpha kept running and answers.
    assert sorted(n.id for n in await rd.client.list_nodes()) == sorted(ids)
    await eventually(lambda: _all_online(rd), what="both nodes online after the rotation")
    assert await _chat(rd, "served") == "served"
    for agent, node in zip(two, result.nodes, strict=False):
        status = await rd.daemon.links.online_client(node.node).status()
        assert status.node_id == node.certificate_id
        trusted = x509.load_pem_x509_certificates(AgentPaths(agent.home).ca_file.read_bytes())
        assert [fingerprint(c) for c in trusted] == [result.new_ca]  # the old CA is trusted nowhere
    # A client holding only the old CA (and the daemon's old client certificate) is refused by both.
    for agent in two:
        stale = AgentClient(agent.url, old_client)
        with pytest.raises(AgentError) as refused:
            await stale.status()
        await stale.close()
        assert refused.value.status == 0


async def _all_online(rd: RunningDaemon) -> bool:
    return set((await _states(rd)).values()) == {NodeState.ONLINE}


async def test_an_offline_node_is_named_and_paired_again_afterwards(
        rd: RunningDaemon, two: list[InProcessAgent], tmp_path: Path, runtime_exe: Path) -> None:
    alpha, beta = two
    await pair_online(rd, alpha)
    beta_id = await pair_online(rd, beta)
    await beta.close()  # the machine is off
    await eventually(lambda: _is(rd, "beta", NodeState.OFFLINE), what="beta offline")

    result = await rd.client.rotate_ca()
    assert result.retired and result.offline == ["beta"]
    assert {n.name: n.outcome for n in result.nodes} == {"alpha": "rotated", "beta": "offline"}
    left = next(n for n in await rd.client.list_nodes() if n.name == "beta")
    assert left.state == NodeState.OFFLINE and "pair it again" in (left.reason or "")

    # Re-pairing: `mirbadllm agent --unpair` there, remove it here, pair it again with the new CA.
    reset_identity(AgentPaths(beta.home))
    await rd.client.remove_node(beta_id)
    again = await start_inprocess_agent(beta.home, name="beta", llama_server=runtime_exe)
    two.append(again)
    await pair_online(rd, again)
    await eventually(lambda: _all_online(rd), what="alpha and the re-paired beta online")


async def _is(rd: RunningDaemon, name: str, state: NodeState) -> bool:
    return (await _states(rd)).get(name) == state


async def test_a_failed_switch_retires_nothing_and_a_second_try_resumes(
        rd: RunningDaemon, two: list[InProcessAgent]) -> None:
    ids = [await pair_online(rd, agent) for agent in two]
    old_ca = (rd.daemon.paths.pki / "ca.crt").read_bytes()
    tls, two[1].deps[-1].tls = two[1].deps[-1].tls, None  # beta cannot take new trust (fault switch)

    failed = await rd.client.rotate_ca()
    assert not failed.retired and "beta" in (failed.problem or "")
    assert {n.name: n.outcome for n in failed.nodes} == {"alpha": "rotated", "beta": "failed"}
    assert (rd.daemon.paths.pki / "ca.crt").read_bytes() == old_ca  # the old CA is still the daemon's
    for node in ids:  # ...and both nodes answer, alpha already holding a certificate from the new CA
        await rd.daemon.links.online_client(node).status()
    assert len(x509.load_pem_x509_certificates(AgentPaths(two[0].home).ca_file.read_bytes())) == 2

    two[1].deps[-1].tls = tls
    resumed = await rd.client.rotate_ca()
    assert resumed.retired and resumed.new_ca == failed.new_ca
    await eventually(lambda: _all_online(rd), what="both nodes online after the resumed rotation")


async def test_a_rotation_while_a_node_is_being_paired_is_refused(rd: RunningDaemon) -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepts, never answers: the pairing waits on it

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pairing = asyncio.ensure_future(rd.client.pair_node(f"127.0.0.1:{port}", "ABCD-EFGH", "ab" * 32))
    await eventually(lambda: rd.daemon.nodes.pairing_busy, what="the pairing under way")
    ca = (rd.daemon.paths.pki / "ca.crt").read_bytes()

    with pytest.raises(DaemonError) as refused:
        await rd.client.rotate_ca()
    assert refused.value.status == 409 and refused.value.code == "pairing_in_progress"
    assert "paired" in refused.value.message
    assert (rd.daemon.paths.pki / "ca.crt").read_bytes() == ca and not (rd.daemon.paths.pki / "ca-next").exists()

    for writer in held:
        writer.close()
    server.close()
    with contextlib.suppress(DaemonError):
        await pairing


async def test_a_second_rotation_while_one_runs_is_refused(rd: RunningDaemon, two: list[InProcessAgent]) -> None:
    for agent in two:
        await pair_online(rd, agent)
    answers = await asyncio.gather(rd.client.rotate_ca(), rd.client.rotate_ca(), return_exceptions=True)
    refused = [a for a in answers if isinstance(a, DaemonError)]
    assert len(refused) == 1 and refused[0].status == 409 and refused[0].code == "ca_rotation_running"
    assert any(not isinstance(a, BaseException) and a.retired for a in answers)


async def test_ctl_rotate_ca_prints_each_node_and_the_offline_ones(
        rd: RunningDaemon, two: list[InProcessAgent], capsys: pytest.CaptureFixture[str]) -> None:
    alpha, beta = two
    await pair_online(rd, alpha)
    await pair_online(rd, beta)
    await beta.close()
    await eventually(lambda: _is(rd, "beta", NodeState.OFFLINE), what="beta offline")

    assert await ctl_nodes.run(ctl.parse_args(["nodes", "rotate-ca"]), rd.client) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "rotated" in out and "is retired" in out
    assert "offline, pair again: beta" in out


async def test_this_machines_agent_rotates_too_and_a_restarted_daemon_keeps_the_new_ca(
        tmp_path: Path, runtime_exe: Path) -> None:
    remote = await start_inprocess_agent(tmp_path / "gamma", name="gamma", llama_server=runtime_exe)
    try:
        async with running_daemon(tmp_path / "daemon", runtime_exe, nodes=MONITOR) as rd:
            node = await pair_online(rd, remote)
            result = await rd.client.rotate_ca()
            assert result.retired and {n.name: n.outcome for n in result.nodes} == {
                "this machine": "rotated", "gamma": "rotated"}
            local = await rd.daemon.links.online_client("local").status()
            assert local.node_id == next(n.certificate_id for n in result.nodes if n.node == "local")
            identity = rd.daemon.paths.local_agent_home / "identity"
            assert [fingerprint(c) for c in x509.load_pem_x509_certificates((identity / "ca.crt").read_bytes())] \
                == [result.new_ca]
        # The next daemon on this home starts with the new CA: its agent and the node answer as they did.
        async with running_daemon(tmp_path / "daemon", runtime_exe, nodes=MONITOR) as again:
            assert (await again.daemon.links.online_client("local").status()).node_id == local.node_id
            await eventually(lambda: _is(again, "gamma", NodeState.ONLINE), what="gamma online after a restart")
            assert [n.id for n in await again.client.list_nodes() if n.name == "gamma"] == [node]
    finally:
        await remote.close()


async def test_an_agent_refuses_trust_it_could_not_use_and_keeps_what_it_had(
        rd: RunningDaemon, two: list[InProcessAgent]) -> None:
    alpha, beta = two
    node = await pair_online(rd, alpha)
    await pair_online(rd, beta)
    paths = AgentPaths(alpha.home)
    before = paths.ca_file.read_bytes(), paths.cert_file.read_bytes()
    client = rd.daemon.links.online_client(node)
    ca = rd.daemon.paths.pki / "ca.crt"
    beta_cert = AgentPaths(beta.home).cert_file.read_text()  # from the right CA, for another agent's key
    for update in (TrustUpdate(ca_pems=[ca.read_text()], agent_cert_pem=beta_cert),
                   TrustUpdate(ca_pems=[beta_cert], agent_cert_pem=paths.cert_file.read_text())):
        with pytest.raises(AgentError) as refused:
            await client.install_trust(update)
        assert refused.value.status == 422 and refused.value.code == "bad_trust"
    assert (paths.ca_file.read_bytes(), paths.cert_file.read_bytes()) == before
    await client.status()


def test_a_retirement_cut_short_by_a_crash_is_finished_at_the_next_start(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    old = CertificateAuthority.load_or_create(pki)
    ensure_client_certificate(old, pki)
    pending = pki / PENDING_CA_DIR
    pending.mkdir()
    new = CertificateAuthority.load_or_create(pending, name="new")
    ensure_client_certificate(new, pending)
    assert not finish_interrupted_retirement(pki)  # the overlap: nothing to finish, the old CA stays
    (pki / "daemon-client.crt").write_bytes((pending / "daemon-client.crt").read_bytes())  # the crash: half done
    new_client = (pending / "daemon-client.crt").read_bytes()

    assert finish_interrupted_retirement(pki)
    assert (pki / "ca.crt").read_bytes() == cert_pem(new.cert) and not pending.exists()
    assert (pki / "daemon-client.crt").read_bytes() == new_client  # the one the agents pin, not a fresh one
    assert ensure_client_certificate(CertificateAuthority.load_or_create(pki), pki)[1].read_bytes() == new_client
