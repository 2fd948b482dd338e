"""The demo's host services: each node's OS services in memory, behind ``DemoDaemon``.

A mixin like ``memory_daemon.services``: it uses the daemon's ``nodes`` and ``_record``. It answers as a
node's agent would through the daemon: whitelisted services by default, every one with ``every``;
denied ones refused (403 ``service_denied``), others than whitelisted refused, protected ones only
with their name typed (403 ``service_confirm_required``), state changing with each action.
The daemon's whitelist (``services_policy``) starts with open-webui for every node; editing it
refuses what the real daemon refuses (422 ``service_denied``, ``service_invalid_name``) and
changes which services the listing calls whitelisted (docker, the NVIDIA persistence daemon and
ollama stand for the agent's own ``services.json``: always whitelisted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.nodes import NodeView
from daemon.api.services import (
    CONFIRM_REQUIRED,
    DENIED,
    INVALID_NAME,
    NOT_WHITELISTED,
    ServiceAction,
    ServiceActionResult,
    ServiceInfo,
    ServiceNames,
    ServicesList,
    ServicesPolicy,
    ServiceState,
    deny_match,
    normalise,
    valid_service_name,
)

DEMO_DENY = ["ssh*", "dbus*", "systemd-*", "mirbadllm*", "gdm*", "networkmanager*"]
DEMO_PROTECTED = ["docker*", "containerd*", "nvidia-persistenced*"]
AGENT_ALLOW = {"docker.service", "nvidia-persistenced.service", "ollama.service"}  # the agent's own file


def _demo_services() -> list[ServiceInfo]:
    def s(name: str, description: str, running: bool, **kw: Any) -> ServiceInfo:
        return ServiceInfo(name=name, display_name=name.removesuffix(".service"), description=description,
                           state=ServiceState.RUNNING if running else ServiceState.STOPPED,
                           detail="active (running)" if running else "inactive (dead)", enabled=True,
                           pid=2100 + len(name) if running else None, **kw)

    return [s("docker.service", "Docker Application Container Engine", True, whitelisted=True, protected=True),
            s("nvidia-persistenced.service", "NVIDIA Persistence Daemon", True, whitelisted=True, protected=True),
            s("ollama.service", "Ollama Service", False, whitelisted=True),
            s("open-webui.service", "Open WebUI", True),  # by the daemon's whitelist
            s("nginx.service", "A high performance web server", True),
            s("ssh.service", "OpenBSD Secure Shell server", True, aliases=["sshd.service"], denied_by="ssh*"),
            s("dbus.service", "D-Bus System Message Bus", True, denied_by="dbus*"),
            s("mirbadllm-agent.service", "MirbadLLM node agent", True, denied_by="mirbadllm*")]


class DemoHostServices:
    if TYPE_CHECKING:
        nodes: list[NodeView]

        def _record(self, name: str, *args: Any) -> None: ...

    _host_services: dict[str, list[ServiceInfo]]
    _services_policy: ServicesPolicy

    def _services_of(self, node_id: str) -> list[ServiceInfo]:
        if not any(n.id == node_id for n in self.nodes):
            raise DaemonError(404, "node_unknown", f"no node '{node_id}'")
        if not hasattr(self, "_host_services"):
            self._host_services = {}
        listed = self._host_services.setdefault(node_id, _demo_services())
        policy = self._policy()
        daemon = {normalise(n) for n in (*policy.allow, *policy.names(node_id).allow)}
        listed[:] = [s.model_copy(update={"whitelisted": s.name in AGENT_ALLOW or normalise(s.name) in daemon})
                     for s in listed]
        return listed

    def _policy(self) -> ServicesPolicy:
        if not hasattr(self, "_services_policy"):
            self._services_policy = ServicesPolicy(allow=["open-webui"])
        return self._services_policy

    async def services_policy(self, node_id: str | None = None) -> ServicesPolicy:
        self._record("services_policy", node_id)
        return self._answer_policy(node_id)

    def _answer_policy(self, node_id: str | None) -> ServicesPolicy:
        policy = self._policy()
        if node_id is None:
            return policy.model_copy(deep=True)
        if not any(n.id == node_id for n in self.nodes):
            raise DaemonError(404, "node_unknown", f"no node '{node_id}'")
        return policy.model_copy(update={"nodes": {node_id: policy.names(node_id)} if node_id in policy.nodes else {}})

    async def set_services_policy(self, names: ServiceNames, node_id: str | None = None) -> ServicesPolicy:
        self._record("set_services_policy", names, node_id)
        if node_id is not None and not any(n.id == node_id for n in self.nodes):
            raise DaemonError(404, "node_unknown", f"no node '{node_id}'")
        cleaned: dict[str, list[str]] = {}
        for field in ("allow", "protected"):
            cleaned[field] = []
            for raw in getattr(names, field):
                if not valid_service_name(raw.strip()):
                    raise DaemonError(422, INVALID_NAME, f"{field}: {raw[:80]!r} is not a service name")
                pattern = deny_match([raw])
                if pattern is not None:
                    raise DaemonError(422, DENIED, f"{field}: {normalise(raw)} is a system service MirbadLLM can "
                                      f"never manage (deny list: {pattern}); it cannot be whitelisted or protected")
                if normalise(raw) not in cleaned[field]:
                    cleaned[field].append(normalise(raw))
        block = ServiceNames(**cleaned)
        policy = self._policy()
        if node_id is None:
            self._services_policy = policy.model_copy(update=block.model_dump())
        else:
            nodes = {k: v for k, v in policy.nodes.items() if k != node_id}
            if block.allow or block.protected:
                nodes[node_id] = block
            self._services_policy = policy.model_copy(update={"nodes": nodes})
        return self._answer_policy(node_id)

    async def list_services(self, node_id: str, every: bool = False) -> ServicesList:
        self._record("list_services", node_id, every)
        services = [s for s in self._services_of(node_id) if every or s.whitelisted]
        return ServicesList(manager="systemd", services=sorted(services, key=lambda s: s.name),
                            deny_patterns=DEMO_DENY, protected_patterns=DEMO_PROTECTED)

    async def service_action(self, node_id: str, name: str, action: ServiceAction,
                             confirm: str | None = None) -> ServiceActionResult:
        self._record("service_action", node_id, name, action, confirm)
        services = self._services_of(node_id)
        key = name.lower().removesuffix(".service")
        found = next((i for i, s in enumerate(services)
                      if key in {n.lower().removesuffix(".service") for n in (s.name, *s.aliases)}), None)
        info = services[found] if found is not None else ServiceInfo(name=name)
        if info.denied_by or any(key.startswith(p.rstrip("*")) for p in DEMO_DENY):
            raise DaemonError(403, DENIED, f"{info.name} is a system service MirbadLLM never manages "
                              f"(deny list: {info.denied_by or 'ssh*'})")
        if found is None or not info.whitelisted:
            raise DaemonError(403, NOT_WHITELISTED, f"{info.name} is not on this node's services whitelist")
        if info.protected and (confirm or "").strip().lower().removesuffix(".service") != key:
            raise DaemonError(403, CONFIRM_REQUIRED, f"{info.name} is protected: type its name to {action} it")
        running = action != "stop"
        after = info.model_copy(update={"state": ServiceState.RUNNING if running else ServiceState.STOPPED,
                                        "detail": "active (running)" if running else "inactive (dead)",
                                        "pid": (info.pid or 3000) + 1 if running else None})
        services[found] = after
        return ServiceActionResult(action=action, service=after, message=f"{action} {after.name}: {after.state.value}")
