"""Host services through the daemon's admin API to a real agent (mutual TLS, in this loop) whose
service manager is a fake behind the composition root's seam: listing, actions, every refusal
(deny list, whitelist, typed name) answered in the API's shape and written to the audit log; and
``mirbadllm ctl services`` against that daemon."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
import yarl

from daemon.api.audit import AuditEntry
from daemon.api.client import DaemonError
from daemon.api.services import ServiceState
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fakes.services import FakeServiceManager
from tests.fleet.inprocess import pair_online, start_inprocess_agent


async def _audit(rd: RunningDaemon) -> list[AuditEntry]:
    """The service entries of the audit log, oldest first (``GET /api/audit?action=service``)."""
    return list(reversed((await rd.client.audit(action="service", limit=500)).entries))


async def _refused(rd: RunningDaemon, node: str, name: str, action: str, confirm: str | None = None) -> DaemonError:
    with pytest.raises(DaemonError) as caught:
        await rd.client.service_action(node, name, action, confirm)  # type: ignore[arg-type]
    return caught.value


async def test_services_through_the_daemon_to_a_real_agent_with_every_refusal_audited(
        tmp_path: Path, runtime_exe: Path) -> None:
    fake = FakeServiceManager()
    agent_home = tmp_path / "agent"
    agent_home.mkdir()
    (agent_home / "services.json").write_text(json.dumps({"allow": ["ollama", "docker", "ssh"]}))
    agent = await start_inprocess_agent(agent_home, name="svc", llama_server=runtime_exe, service_manager=fake)
    home = tmp_path / "daemon"
    home.mkdir()
    # The daemon's own whitelist: adds nginx, and tries dbus and the agent itself (it cannot).
    (home / "services.json").write_text(json.dumps({"allow": ["nginx", "dbus", "mirbadllm-agent"]}))
    try:
        async with running_daemon(home, None, local_agent=False) as rd:
            node = await pair_online(rd, agent)
            listing = await rd.client.list_services(node)
            assert listing.manager == "systemd"
            by_name = {s.name: s for s in listing.services}
            assert sorted(n for n, s in by_name.items() if s.manageable) == [
                "docker.service", "nginx.service", "ollama.service"]
            assert by_name["ssh.service"].denied_by == "ssh*" and by_name["docker.service"].protected

            started = await rd.client.service_action(node, "ollama", "start")
            assert started.service.state is ServiceState.RUNNING and fake.units["ollama.service"].running
            stopped = await rd.client.service_action(node, "nginx", "stop")  # whitelisted by the daemon
            assert stopped.service.state is ServiceState.STOPPED

            for name, code in (("ssh", "service_denied"), ("sshd", "service_denied"), ("dbus", "service_denied"),
                               ("mirbadllm-agent", "service_denied"), ("gdm3", "service_denied"),
                               ("ollama-extra", "service_not_whitelisted")):
                refused = await _refused(rd, node, name, "stop", confirm=name)
                assert (refused.status, refused.code) == (403, code), name
            needs = await _refused(rd, node, "docker", "restart")
            assert (needs.status, needs.code) == (403, "service_confirm_required")
            assert (await _refused(rd, node, "docker", "restart", confirm="nginx")).code == "service_confirm_required"
            assert fake.calls == [("start", "ollama.service"), ("stop", "nginx.service")]
            done = await rd.client.service_action(node, "docker", "restart", confirm="docker")
            assert done.service.state is ServiceState.RUNNING

            assert (await _refused(rd, node, "ollama", "explode")).status == 404
            async with aiohttp.ClientSession() as raw:  # a name of dots, sent encoded past our clients' guard
                url = yarl.URL(f"http://127.0.0.1:{rd.daemon.config.port}/api/nodes/{node}/services/%2E%2E/stop",
                               encoded=True)
                calls = list(fake.calls)
                async with raw.post(url, headers={"Authorization": f"Bearer {rd.daemon.admin_token}"}) as resp:
                    assert resp.status == 422 and (await resp.json())["error"]["code"] == "service_invalid_name"
                assert fake.calls == calls
            assert (await _refused(rd, "no-such-node", "ollama", "start")).code == "node_unknown"
            every = await rd.client.list_services(node, every=True)
            assert {s.name for s in every.services} >= {"dbus.service", "gdm3.service", "trap.service"}

            entries = await _audit(rd)
            assert {e.actor for e in entries} == {"admin token"}  # this client names no client
            started_entry = next(e for e in entries if e.action == "service.start" and e.subject == f"{node}/ollama")
            assert started_entry.detail == "ok: running" and started_entry.after["name"] == "ollama.service"
            assert started_entry.after["state"] == "running"
            audit = [(e.action, e.subject, e.detail) for e in entries]
            assert ("service.restart", f"{node}/docker", "ok: running") in audit
            assert any(a == "service.stop" and s == f"{node}/ssh" and d.startswith("refused (service_denied)")
                       for a, s, d in audit)
            assert any(s == f"{node}/docker" and d.startswith("refused (service_confirm_required)")
                       for a, s, d in audit)
            assert any(s == "no-such-node/ollama" and "node_unknown" in d for a, s, d in audit)
    finally:
        await agent.close()


async def test_ctl_services_lists_acts_and_needs_confirm_for_a_protected_one(
        tmp_path: Path, runtime_exe: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeServiceManager()
    agent_home = tmp_path / "agent"
    agent_home.mkdir()
    (agent_home / "services.json").write_text(json.dumps({"allow": ["ollama", "docker"]}))
    agent = await start_inprocess_agent(agent_home, name="ctlsvc", llama_server=runtime_exe, service_manager=fake)
    try:
        async with running_daemon(tmp_path / "daemon", None, local_agent=False) as rd:
            node = await pair_online(rd, agent)

            async def run(*argv: str) -> int:
                return await ctl.run(ctl.parse_args(list(argv)), rd.client)

            assert await run("services", "ctlsvc") == 0  # by the node's name
            out = capsys.readouterr().out
            assert "ollama.service" in out and "stopped" in out and "protected: --confirm NAME" in out
            assert "ssh.service" not in out
            assert await run("services", node[:8], "list", "--all") == 0
            assert "system, not manageable (ssh*)" in capsys.readouterr().out
            assert await run("services", "ctlsvc", "start", "ollama") == 0
            assert "start ollama.service: running" in capsys.readouterr().out
            with pytest.raises(DaemonError) as refused:
                await run("services", "ctlsvc", "stop", "docker")
            assert refused.value.code == "service_confirm_required"
            assert await run("services", "ctlsvc", "stop", "docker", "--confirm", "docker") == 0
            assert "stop docker.service: stopped" in capsys.readouterr().out
            with pytest.raises(DaemonError) as denied:
                await run("services", "ctlsvc", "restart", "sshd", "--confirm", "sshd")
            assert denied.value.code == "service_denied"
            assert await run("services", "ctlsvc", "stop") == 2
            assert fake.calls == [("start", "ollama.service"), ("stop", "docker.service")]
    finally:
        await agent.close()


