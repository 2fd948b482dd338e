"""``FakeServiceManager``: a node's service manager in memory, behind the agent's ``ServiceManager`` seam.

Stateful like the real ones: start runs a service (a new pid), stop stops it, restart does both;
an unknown name is no service; aliases answer for their unit, as systemd's do. ``calls`` records
every action that reached the OS, so a test can prove a refusal never got there. ``failing``
names services whose next action fails as the OS would say it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from agent.api.services import ManagerKind, ServiceInfo, ServiceState
from agent.services.manager import ServiceCommandFailed


@dataclass
class FakeUnit:
    name: str
    description: str = ""
    aliases: list[str] = field(default_factory=list)
    running: bool = False
    enabled: bool = True
    pid: int | None = None


def default_units() -> list[FakeUnit]:
    return [FakeUnit("ssh.service", "OpenBSD Secure Shell server", ["sshd.service"], running=True),
            FakeUnit("dbus.service", "D-Bus System Message Bus", running=True),
            FakeUnit("mirbadllm-agent.service", "MirbadLLM node agent", running=True),
            FakeUnit("gdm3.service", "GNOME Display Manager", ["display-manager.service"], running=True),
            FakeUnit("docker.service", "Docker Application Container Engine", running=True),
            FakeUnit("ollama.service", "Ollama Service", running=False),
            FakeUnit("nginx.service", "A high performance web server", running=True),
            FakeUnit("trap.service", "A unit whose alias is sshd", ["sshd-keys.service"])]


class FakeServiceManager:
    kind: ManagerKind = "systemd"

    def __init__(self, units: list[FakeUnit] | None = None) -> None:
        self.units = {u.name: u for u in (units if units is not None else default_units())}
        self.calls: list[tuple[str, str]] = []
        self.failing: dict[str, str] = {}
        self._pids = itertools.count(4000)
        for unit in self.units.values():
            if unit.running:
                unit.pid = next(self._pids)

    def _find(self, name: str) -> FakeUnit | None:
        key = name if name.endswith(".service") else f"{name}.service"
        return next((u for u in self.units.values() if key in (u.name, *u.aliases)), None)

    def _info(self, unit: FakeUnit) -> ServiceInfo:
        state = ServiceState.RUNNING if unit.running else ServiceState.STOPPED
        return ServiceInfo(name=unit.name, display_name=unit.name.removesuffix(".service"),
                           description=unit.description, aliases=list(unit.aliases), state=state,
                           detail="active (running)" if unit.running else "inactive (dead)",
                           enabled=unit.enabled, pid=unit.pid)

    async def list(self) -> list[ServiceInfo]:
        return [self._info(u) for u in sorted(self.units.values(), key=lambda u: u.name)]

    async def status(self, name: str) -> ServiceInfo | None:
        unit = self._find(name)
        return None if unit is None else self._info(unit)

    def _act(self, action: str, name: str) -> FakeUnit:
        unit = self._find(name)
        if unit is None:
            raise ServiceCommandFailed(f"Unit {name} not found.")
        self.calls.append((action, unit.name))
        if unit.name in self.failing:
            raise ServiceCommandFailed(self.failing.pop(unit.name))
        return unit

    async def start(self, name: str) -> None:
        unit = self._act("start", name)
        if not unit.running:
            unit.running, unit.pid = True, next(self._pids)

    async def stop(self, name: str) -> None:
        unit = self._act("stop", name)
        unit.running, unit.pid = False, None

    async def restart(self, name: str) -> None:
        unit = self._act("restart", name)
        unit.running, unit.pid = True, next(self._pids)
