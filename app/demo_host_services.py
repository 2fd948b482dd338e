"""The demo's host services: each node's OS services in memory, behind ``DemoDaemon``.

A mixin like ``app.demo_services``: it uses the daemon's ``nodes`` and ``_record``. It answers as a
node's agent would through the daemon: whitelisted services by default, every one with ``every``;
denied ones refused (403 ``service_denied``), others than whitelisted refused, protected ones only
with their name typed (403 ``service_confirm_required``), state changing with each action.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.nodes import NodeView
from daemon.api.services import (
    CONFIRM_REQUIRED,
    DENIED,
    NOT_WHITELISTED,
    ServiceAction,
    ServiceActionResult,
    ServiceInfo,
    ServicesList,
    ServiceState,
)

DEMO_DENY = ["ssh*", "dbus*", "systemd-*", "mirbadllm*", "gdm*", "networkmanager*"]
DEMO_PROTECTED = ["docker*", "containerd*", "nvidia-persistenced*"]


def _demo_services() -> list[ServiceInfo]:
    def s(name: str, description: str, running: bool, **kw: Any) -> ServiceInfo:
        return ServiceInfo(name=name, display_name=name.removesuffix(".service"), description=description,
                           state=ServiceState.RUNNING if running else ServiceState.STOPPED,
                           detail="active (running)" if running else "inactive (dead)", enabled=True,
                           pid=2100 + len(name) if running else None, **kw)

    return [s("docker.service", "Docker Application Container Engine", True, whitelisted=True, protected=True),
            s("nvidia-persistenced.service", "NVIDIA Persistence Daemon", True, whitelisted=True, protected=True),
            s("ollama.service", "Ollama Service", False, whitelisted=True),
            s("open-webui.service", "Open WebUI", True, whitelisted=True),
            s("nginx.service", "A high performance web server", True),
            s("ssh.service", "OpenBSD Secure Shell server", True, aliases=["sshd.service"], denied_by="ssh*"),
            s("dbus.service", "D-Bus System Message Bus", True, denied_by="dbus*"),
            s("mirbadllm-agent.service", "MirbadLLM node agent", True, denied_by="mirbadllm*")]


class DemoHostServices:
    if TYPE_CHECKING:
        nodes: list[NodeView]

        def _record(self, name: str, *args: Any) -> None: ...

    _host_services: dict[str, list[ServiceInfo]]

    def _services_of(self, node_id: str) -> list[ServiceInfo]:
        if not any(n.id == node_id for n in self.nodes):
            raise DaemonError(404, "node_unknown", f"no node '{node_id}'")
        if not hasattr(self, "_host_services"):
            self._host_services = {}
        return self._host_services.setdefault(node_id, _demo_services())

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
