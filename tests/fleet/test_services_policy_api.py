"""The daemon's services whitelist edited through the admin API (``/api/services/policy``, per node
under ``/api/nodes/{id}/services/policy``) with a real agent (mutual TLS, in this loop) whose
service manager is a fake: names stored as the agent compares them, the deny list refused with
422 and nothing written, an unreadable file never overwritten, each change audited with the
block before and after, and the agent judging by the new whitelist on the next request; and
``mirbadllm ctl services allow|disallow|policy`` against that daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.services import ServiceNames
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fakes.services import FakeServiceManager
from tests.fleet.inprocess import InProcessAgent, pair_online, start_inprocess_agent


async def _agent(tmp_path: Path, runtime_exe: Path, name: str) -> tuple[InProcessAgent, FakeServiceManager]:
    fake = FakeServiceManager()
    home = tmp_path / "agent"
    home.mkdir()
    return await start_inprocess_agent(home, name=name, llama_server=runtime_exe, service_manager=fake), fake


async def _refused(rd: RunningDaemon, names: ServiceNames, node: str | None = None) -> DaemonError:
    with pytest.raises(DaemonError) as caught:
        await rd.client.set_services_policy(names, node)
    return caught.value


async def test_the_whitelist_is_edited_validated_and_audited_and_the_agent_follows_it(
        tmp_path: Path, runtime_exe: Path) -> None:
    agent, fake = await _agent(tmp_path, runtime_exe, "pol")
    home = tmp_path / "daemon"
    home.mkdir()
    policy_file = home / "services.json"
    policy_file.write_text(json.dumps({"_note": "kept by every edit", "allow": []}))
    try:
        async with running_daemon(home, None, local_agent=False) as rd:
            node = await pair_online(rd, agent)
            first = await rd.client.services_policy()
            assert (first.allow, first.nodes, first.error) == ([], {}, None)
            assert "ssh*" in first.deny_patterns and "docker*" in first.protected_patterns
            assert not any(s.manageable for s in (await rd.client.list_services(node)).services)

            after = await rd.client.set_services_policy(ServiceNames(allow=["Nginx.service", " nginx", "ollama"]))
            assert after.allow == ["nginx", "ollama"]  # normalised as the agent compares, once each
            on_disk = json.loads(policy_file.read_text())
            assert on_disk["allow"] == ["nginx", "ollama"] and on_disk["_note"] == "kept by every edit"
            listing = await rd.client.list_services(node)
            assert sorted(s.name for s in listing.services if s.manageable) == ["nginx.service", "ollama.service"]

            # This node only: nginx protected from now on, the daemon's file per node.
            per_node = await rd.client.set_services_policy(ServiceNames(protected=["nginx"]), node)
            assert per_node.nodes[node].protected == ["nginx"] and per_node.allow == ["nginx", "ollama"]
            with pytest.raises(DaemonError) as caught:
                await rd.client.service_action(node, "nginx", "stop")
            assert caught.value.code == "service_confirm_required"
            assert (await rd.client.service_action(node, "nginx", "stop", confirm="nginx")).service.state.value == \
                "stopped"

            before = policy_file.read_bytes()
            for names, where, code, words in (
                    (ServiceNames(allow=["nginx", "ssh"]), None, "service_denied", "ssh is a system service"),
                    (ServiceNames(allow=["sshd.service"]), node, "service_denied", "can never manage"),
                    (ServiceNames(protected=["dbus"]), None, "service_denied", "deny list: dbus*"),
                    (ServiceNames(allow=["mirbadllm-agent"]), node, "service_denied", "mirbadllm-agent"),
                    (ServiceNames(allow=["../../etc/passwd"]), None, "service_invalid_name", "not a service name"),
                    (ServiceNames(allow=["-H host"]), node, "service_invalid_name", "not a service name")):
                refused = await _refused(rd, names, where)
                assert (refused.status, refused.code) == (422, code), names
                assert words in refused.message, refused.message
            unknown = await _refused(rd, ServiceNames(allow=["nginx"]), "no-such-node")
            assert (unknown.status, unknown.code) == (404, "node_unknown")
            assert policy_file.read_bytes() == before  # nothing refused was written

            # Only this node's block in the per-node answer; an emptied block goes from the file.
            assert set((await rd.client.services_policy(node)).nodes) == {node}
            cleared = await rd.client.set_services_policy(ServiceNames(), node)
            assert cleared.nodes == {} and "nodes" in json.loads(policy_file.read_text())
            assert json.loads(policy_file.read_text())["nodes"] == {}
            unchanged = await rd.client.set_services_policy(ServiceNames(allow=["nginx", "ollama"]))
            assert unchanged.allow == ["nginx", "ollama"]

            # A hand edit that broke the file: read as nothing, never overwritten.
            policy_file.write_text('{"allow": ["nginx",]')
            broken = await rd.client.services_policy()
            assert broken.error is not None and "unreadable" in broken.error and broken.allow == []
            conflict = await _refused(rd, ServiceNames(allow=["ollama"]))
            assert (conflict.status, conflict.code) == (409, "services_policy_unreadable")
            assert policy_file.read_text() == '{"allow": ["nginx",]'

            entries = list(reversed((await rd.client.audit(action="service.policy", limit=50)).entries))
            assert [(e.subject, e.detail) for e in entries] == [
                ("*", "allow +nginx, allow +ollama"), (node, "protected +nginx"), (node, "protected -nginx")]
            assert entries[0].before == {"allow": [], "protected": []}
            assert entries[0].after == {"allow": ["nginx", "ollama"], "protected": []}
            assert entries[0].actor == "admin token"
            assert fake.calls == [("stop", "nginx.service")]
    finally:
        await agent.close()


async def test_ctl_services_allow_disallow_and_policy(tmp_path: Path, runtime_exe: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    agent, fake = await _agent(tmp_path, runtime_exe, "ctlpol")
    try:
        async with running_daemon(tmp_path / "daemon", None, local_agent=False) as rd:
            node = await pair_online(rd, agent)

            async def run(*argv: str) -> int:
                return await ctl.run(ctl.parse_args(list(argv)), rd.client)

            assert await run("services", "allow", "ollama.service") == 0
            assert "allowed ollama on every node" in capsys.readouterr().out
            assert await run("services", "allow", "nginx", "--node", "ctlpol", "--protected") == 0
            assert f"allowed nginx on node {node} (protected)" in capsys.readouterr().out
            assert await run("services", "policy") == 0
            out = capsys.readouterr().out
            assert "every node: ollama" in out and f"node {node}: nginx (protected)" in out

            assert await run("services", "ctlpol", "start", "ollama") == 0  # whitelisted: it acts
            assert "start ollama.service: running" in capsys.readouterr().out
            with pytest.raises(DaemonError) as denied:
                await run("services", "allow", "sshd", "--node", "ctlpol")
            assert denied.value.status == 422 and "can never manage" in denied.value.message

            assert await run("services", "disallow", "nginx") == 1  # not on every node's list
            assert "nginx is not on the daemon's whitelist on every node (try --node NODE)" in capsys.readouterr().out
            assert await run("services", "disallow", "nginx", "--node", "ctlpol") == 0
            assert f"removed nginx from the whitelist on node {node}" in capsys.readouterr().out
            assert await run("services", "disallow", "ollama", "--node", "ctlpol") == 1
            assert "(it is on every node's: disallow it without --node)" in capsys.readouterr().out
            assert await run("services", "disallow", "ollama") == 0
            assert "removed ollama from the whitelist on every node" in capsys.readouterr().out
            assert not any(s.manageable for s in (await rd.client.list_services(node)).services)
            assert await run("services", "policy") == 0
            assert capsys.readouterr().out.strip() == "every node: none"
            assert await run("services", "allow") == 2
            assert await run("services", "ctlpol", "explode") == 2
            assert fake.calls == [("start", "ollama.service")]
    finally:
        await agent.close()
