"""The audit trail of a node's pairing and removal: who did it, the node record at each (its
certificate left out), and the pairing code nowhere in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.api.pairing import normalize_code
from daemon.api.client import DaemonClient
from tests.daemon.harness import RunningDaemon
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent


@pytest.fixture
async def agent(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[InProcessAgent]:
    started = await start_inprocess_agent(tmp_path / "agent", name="zeta", llama_server=runtime_exe)
    yield started
    await started.close()


async def test_pairing_and_removal_are_audited_with_the_node_record(agent: InProcessAgent,
                                                                    rd: RunningDaemon) -> None:
    app = DaemonClient(rd.url, rd.daemon.admin_token, client_name="app")
    ctl = DaemonClient(rd.url, rd.daemon.admin_token, client_name="ctl")
    offer = agent.last("pairing")
    try:
        node = await app.pair_node(f"127.0.0.1:{agent.lifecycle.port}", offer["code"], offer["fingerprint"])
        await ctl.remove_node(node.id)
        page = await app.audit(subject=node.id)
    finally:
        await app.close()
        await ctl.close()
    removed, paired = page.entries
    assert (paired.action, paired.actor, removed.action, removed.actor) == ("node.pair", "app", "node.remove", "ctl")
    assert paired.after["name"] == "zeta" and paired.after["port"] == agent.lifecycle.port
    assert paired.after["pairing_fingerprint"] == offer["fingerprint"].lower()
    assert paired.after["certificate_pem"] == "[PEM omitted]" and paired.before is None
    assert removed.before["name"] == "zeta" and removed.after is None
    text = page.model_dump_json()
    for form in (offer["code"], normalize_code(offer["code"])):
        assert form not in text
