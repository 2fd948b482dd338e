"""Host services on the agent, over its real mutual-TLS API, with a fake service manager behind the
seam: the deny list wins over any whitelist (the agent's file or the names the daemon sends),
protected services need their name typed, and nothing refused ever reaches the OS."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.services import ServiceActionRequest, ServiceState
from agent.deps import AgentDeps, build_deps
from agent.identity import server_ssl_context
from agent.server import create_app, start_server
from agent.services.policy import ServicePolicy, own_service_names, read_policy_file
from tests.agent._support import issue_tls
from tests.fakes import FakeGpuProbe
from tests.fakes.services import FakeServiceManager, FakeUnit, default_units


@dataclass
class Node:
    deps: AgentDeps
    client: AgentClient
    fake: FakeServiceManager


@pytest.fixture
async def node(tmp_path: Path, port_base: int) -> AsyncIterator[Callable[..., Any]]:
    cleanups: list[Any] = []

    async def start(policy: dict[str, Any] | None = None, units: list[FakeUnit] | None = None) -> Node:
        home = tmp_path / "agent"
        tls = issue_tls(tmp_path, home / "identity")
        if policy is not None:
            (home / "services.json").write_text(json.dumps(policy))
        fake = FakeServiceManager(units)
        deps = build_deps(home, gpu_probe=FakeGpuProbe([]), first_port=port_base, service_manager=fake)
        runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
        client = AgentClient(f"https://127.0.0.1:{port}", tls.client_context())
        cleanups.append((client, runner))
        return Node(deps, client, fake)

    yield start
    for client, runner in cleanups:
        await client.close()
        await runner.cleanup()


async def _refused(client: AgentClient, name: str, action: str = "stop", **body: Any) -> AgentError:
    with pytest.raises(AgentError) as caught:
        await client.service_action(name, action, ServiceActionRequest(**body))  # type: ignore[arg-type]
    return caught.value


async def test_the_deny_list_refuses_ssh_dbus_and_the_agent_itself_even_when_whitelisted(
        node: Any, caplog: pytest.LogCaptureFixture) -> None:
    everything = ["ssh", "sshd.service", "dbus", "mirbadllm-agent", "display-manager", "trap", "nginx"]
    n = await node({"allow": everything})
    caplog.set_level(logging.INFO, logger="agent.services.service")
    for name in ("ssh", "sshd.service", "SSHD", "dbus", "mirbadllm-agent.service", "display-manager"):
        for action in ("stop", "restart"):
            refused = await _refused(n.client, name, action, allow=everything, confirm=name)  # daemon-sent too
            assert (refused.status, refused.code) == (403, "service_denied"), name
    # gdm3 itself is whitelisted nowhere, but its alias display-manager is denied: gdm3 is denied too.
    refused = await _refused(n.client, "gdm3", allow=["gdm3"])
    assert refused.code == "service_denied" and refused.details["pattern"] == "gdm*"
    # trap.service looks harmless, but systemd says it is also sshd-keys.service.
    refused = await _refused(n.client, "trap", "start")
    assert refused.code == "service_denied" and "ssh*" in refused.message
    assert n.fake.calls == []  # not one refused action reached the OS
    assert n.fake.units["ssh.service"].running and n.fake.units["dbus.service"].running
    assert "service action name=ssh action=stop result=refused code=service_denied" in caplog.text

    listing = {s.name: s for s in (await n.client.services(allow=everything)).services}
    assert [name for name, s in listing.items() if s.manageable] == ["nginx.service"]
    assert listing["mirbadllm-agent.service"].denied_by == "mirbadllm-agent*"  # shown, with the reason
    every = {s.name: s for s in (await n.client.services(every=True)).services}
    assert every["ssh.service"].denied_by == "ssh*" and every["gdm3.service"].denied_by == "gdm*"
    assert every["ollama.service"].denied_by is None and not every["ollama.service"].whitelisted


async def test_only_whitelisted_services_are_acted_on_and_the_state_follows(node: Any) -> None:
    n = await node({"allow": ["ollama"]})
    refused = await _refused(n.client, "nginx", "stop")
    assert (refused.status, refused.code) == (403, "service_not_whitelisted")
    started = await n.client.service_action("ollama", "start", ServiceActionRequest())
    assert started.service.name == "ollama.service" and started.service.state is ServiceState.RUNNING
    assert started.service.pid is not None
    restarted = await n.client.service_action("ollama.service", "restart", ServiceActionRequest())
    assert restarted.service.pid not in (None, started.service.pid)
    stopped = await n.client.service_action("ollama", "stop", ServiceActionRequest())
    assert stopped.service.state is ServiceState.STOPPED
    # The daemon's whitelist adds to the agent's.
    sent = await n.client.service_action("nginx", "stop", ServiceActionRequest(allow=["nginx"]))
    assert sent.service.state is ServiceState.STOPPED
    assert n.fake.calls == [("start", "ollama.service"), ("restart", "ollama.service"), ("stop", "ollama.service"),
                            ("stop", "nginx.service")]
    missing = await _refused(n.client, "ghost", allow=["ghost"])
    assert (missing.status, missing.code) == (404, "service_not_found")
    n.fake.failing["nginx.service"] = "Failed to start nginx.service: Interactive authentication required."
    failed = await _refused(n.client, "nginx", "start", allow=["nginx"])
    assert failed.status == 502 and "Interactive authentication required" in failed.message


async def test_a_protected_service_needs_its_name_typed(node: Any) -> None:
    n = await node({"allow": ["docker", "nginx"], "protected": ["nginx"]})
    for body in ({}, {"confirm": "dock"}, {"confirm": "nginx"}):
        refused = await _refused(n.client, "docker", "restart", **body)
        assert (refused.status, refused.code) == (403, "service_confirm_required")
    assert n.fake.calls == []
    done = await n.client.service_action("docker", "restart", ServiceActionRequest(confirm="Docker.service"))
    assert done.service.protected and done.service.state is ServiceState.RUNNING
    assert (await _refused(n.client, "nginx", "stop")).code == "service_confirm_required"  # the file protects it
    # ...and so may the daemon, for a service neither list protects.
    n2 = await n.client.service_action("ollama", "start", ServiceActionRequest(allow=["ollama"]))
    assert not n2.service.protected
    refused = await _refused(n.client, "ollama", "stop", allow=["ollama"], protect=["ollama"])
    assert refused.code == "service_confirm_required"
    assert n.fake.calls == [("restart", "docker.service"), ("start", "ollama.service")]


async def test_names_that_are_no_service_names_are_refused_before_anything_runs(node: Any) -> None:
    n = await node({"allow": ["--now"]})
    for name in ("--now", "-x", "a b\n", " nginx"):
        refused = await _refused(n.client, name, allow=[name])
        assert (refused.status, refused.code) == (422, "service_invalid_name"), name
    assert n.fake.calls == []


async def test_an_unreadable_policy_whitelists_nothing_and_says_so(node: Any) -> None:
    n = await node(units=default_units())
    (n.deps.paths.home / "services.json").write_text("{not json")
    n.deps.services.policy = ServicePolicy(read_policy_file(n.deps.paths.home / "services.json"))  # type: ignore[union-attr]
    listing = await n.client.services()
    assert listing.services == [] and "services.json is unreadable" in (listing.error or "")
    assert (await _refused(n.client, "ollama")).code == "service_not_whitelisted"


def test_the_agents_own_unit_and_label_are_read_from_its_cgroup_and_environment(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/system.slice/mirbadllm-node.service\n")
    names = own_service_names(cgroup, {"XPC_SERVICE_NAME": "com.example.renamed-agent"})
    assert names == ["mirbadllm-node.service", "com.example.renamed-agent"]
    policy = ServicePolicy(read_policy_file(tmp_path / "none.json"), ["acme-node.service"])
    from agent.api.services import ServiceInfo
    judged = policy.judge(ServiceInfo(name="acme-node.service"), allow=["acme-node"])
    assert judged.whitelisted and judged.denied_by == "acme-node"
