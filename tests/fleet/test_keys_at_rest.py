"""With a keychain (the tests' in-memory one) every private key on disk is encrypted, and the daemon
and an agent still pair and talk mutual TLS; without one the daemon's status says its keys are 0600
files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.api.client import AgentClient
from core.key_store import SERVICE, account
from daemon.api.nodes import NodeState
from daemon.nodes.store import node_ssl_context
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon
from tests.fakes.keychain import MemoryKeychain
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent


@pytest.fixture
async def agent(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[InProcessAgent]:
    started = await start_inprocess_agent(tmp_path / "agent", name="omega", llama_server=runtime_exe)
    yield started
    await started.close()


async def test_encrypted_keys_pair_and_talk_mutual_tls(keychain: MemoryKeychain, rd: RunningDaemon,
                                                       agent: InProcessAgent, tmp_path: Path) -> None:
    node = await rd.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", agent.last("pairing")["code"],
                                     agent.last("pairing")["fingerprint"])

    async def online() -> bool:
        return (await rd.client.get_node(node.id)).state == NodeState.ONLINE

    await eventually(online, what="the paired node online over mutual TLS")
    pki = rd.daemon.paths.pki
    keys = [pki / "ca.key", pki / "daemon-client.key", tmp_path / "agent" / "identity" / "agent.key"]
    for key in keys:
        data = key.read_bytes()
        assert b"BEGIN ENCRYPTED PRIVATE KEY" in data, key
        assert b"BEGIN PRIVATE KEY" not in data and b"BEGIN EC PRIVATE KEY" not in data, key
        assert (SERVICE, account(key)) in keychain.entries, key

    status = await rd.client.status()
    assert status.keys_at_rest is not None and status.keys_at_rest.keychain
    assert status.keys_at_rest.warning is None

    record = rd.daemon.nodes.store.get(node.id)
    assert record is not None
    client = AgentClient(agent.url, node_ssl_context(record.certificate_pem, pki / "daemon-client.crt",
                                                     pki / "daemon-client.key"))
    try:
        agent_status = await client.status()
    finally:
        await client.close()
    assert agent_status.keys_at_rest is not None and agent_status.keys_at_rest.keychain


async def test_without_a_keychain_the_status_warns_that_keys_are_0600_files(
        rd: RunningDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    status = await rd.client.status()
    assert status.keys_at_rest is not None and not status.keys_at_rest.keychain
    warning = status.keys_at_rest.warning or ""
    assert "0600" in warning and "ca.key" in warning and "MIRBADLLM_KEYRING=off" in warning
    for key in (rd.daemon.paths.pki / "ca.key", rd.daemon.paths.pki / "daemon-client.key"):
        assert b"BEGIN PRIVATE KEY" in key.read_bytes() and key.stat().st_mode & 0o777 == 0o600

    capsys.readouterr()
    assert await ctl.run(ctl.parse_args(["status"]), rd.client) == 0
    out = capsys.readouterr().out.splitlines()  # one short line each time; the why once, where asked
    assert "note: private keys are 0600 files, not in a keychain (`mirbadllm ctl status -v` says why)" in out
    assert not any(warning in line for line in out)
    assert await ctl.run(ctl.parse_args(["status", "-v"]), rd.client) == 0
    assert f"warning: {warning}" in capsys.readouterr().out.splitlines()
