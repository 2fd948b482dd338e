"""Windows services through the Service Control Manager's own tool, ``sc.exe`` (always there; no
pywin32 needed).

- list: ``sc.exe queryex type= service state= all bufsize= 65536``: blocks of ``SERVICE_NAME:``,
  ``DISPLAY_NAME:`` and indented ``KEY : value`` lines (``STATE : 4  RUNNING``, ``PID : 2484``,
  ``WIN32_EXIT_CODE : 1067  (0x42b)``).
- status: ``sc.exe queryex NAME`` (the same block without DISPLAY_NAME); exit code 1060 is no such service.
- start ``sc.exe start NAME``, stop ``sc.exe stop NAME`` (1056 "already running" and 1062 "not
  started" are what was asked), restart = stop, then start; the SCM answers at once with a
  pending state, so each waits (polling the state, 60 s) until the service is there.
"""

from __future__ import annotations

import asyncio
import time

from agent.api.services import ManagerKind, ServiceInfo, ServiceState
from agent.services.manager import (
    ACTION_TIMEOUT_S,
    QUERY_TIMEOUT_S,
    Runner,
    ServiceCommandFailed,
    run_argv,
)

NOT_FOUND_RC = 1060
ALREADY_RUNNING_RC = 1056
NOT_STARTED_RC = 1062
NEVER_STARTED = 1077  # ERROR_SERVICE_NEVER_STARTED: a stopped service that simply never ran
POLL_S = 0.5
_STATES = {1: ServiceState.STOPPED, 2: ServiceState.STARTING, 3: ServiceState.STOPPING, 4: ServiceState.RUNNING,
           5: ServiceState.STARTING, 6: ServiceState.STOPPING, 7: ServiceState.STOPPED}


def parse_query(text: str) -> list[dict[str, str]]:
    """``sc.exe query``/``queryex`` output as one dict per service (keys upper-case, values trimmed)."""
    services: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for raw in text.replace("\r", "").splitlines():
        line = raw.strip()
        if line.startswith("SERVICE_NAME:"):
            current = {"SERVICE_NAME": line.partition(":")[2].strip()}
            services.append(current)
            continue
        if current is None or ":" not in line:
            continue  # a flags line "(STOPPABLE, ...)", a blank one
        key, _, value = line.partition(":")
        current[key.strip()] = value.strip()
    return services


def _leading_int(value: str) -> int | None:
    head = value.split()[0] if value.split() else ""
    return int(head) if head.isdigit() else None


def info_from_query(props: dict[str, str]) -> ServiceInfo:
    code = _leading_int(props.get("STATE", ""))
    state = _STATES.get(code or 0, ServiceState.UNKNOWN)
    exit_code = _leading_int(props.get("WIN32_EXIT_CODE", "")) or 0
    if state is ServiceState.STOPPED and exit_code not in (0, NEVER_STARTED):
        state = ServiceState.FAILED
    words = props.get("STATE", "").split()
    detail = words[1] if len(words) > 1 else ""
    if state is ServiceState.FAILED:
        detail += f", exit code {exit_code}"
    pid = _leading_int(props.get("PID", ""))
    name = props["SERVICE_NAME"]
    return ServiceInfo(name=name, display_name=props.get("DISPLAY_NAME") or name, state=state, detail=detail,
                       pid=pid or None)


class ScmManager:
    kind: ManagerKind = "scm"

    def __init__(self, runner: Runner = run_argv, action_timeout_s: float = ACTION_TIMEOUT_S) -> None:
        self._run = runner
        self._timeout = action_timeout_s

    async def list(self) -> list[ServiceInfo]:
        done = await self._run(["sc.exe", "queryex", "type=", "service", "state=", "all", "bufsize=", "65536"],
                               QUERY_TIMEOUT_S)
        if done.returncode != 0:
            raise ServiceCommandFailed(f"sc.exe queryex: {done.words()}")
        return sorted((info_from_query(p) for p in parse_query(done.stdout)), key=lambda i: i.name.lower())

    async def status(self, name: str) -> ServiceInfo | None:
        done = await self._run(["sc.exe", "queryex", name], QUERY_TIMEOUT_S)
        if done.returncode == NOT_FOUND_RC:
            return None
        if done.returncode != 0:
            raise ServiceCommandFailed(f"sc.exe queryex: {done.words()}")
        services = parse_query(done.stdout)
        return info_from_query(services[0]) if services else None

    async def _sc(self, verb: str, name: str, fine: int) -> None:
        done = await self._run(["sc.exe", verb, name], self._timeout)
        if done.returncode not in (0, fine):
            raise ServiceCommandFailed(done.words())

    async def _wait_for(self, name: str, wanted: ServiceState) -> None:
        deadline = time.monotonic() + self._timeout
        while True:
            info = await self.status(name)
            if info is None:
                raise ServiceCommandFailed(f"{name} is gone")
            if info.state is wanted or (wanted is ServiceState.STOPPED and info.state is ServiceState.FAILED):
                return
            if info.state is ServiceState.FAILED or time.monotonic() > deadline:
                raise ServiceCommandFailed(f"{name} is {info.detail or info.state.value}, not {wanted.value}")
            await asyncio.sleep(POLL_S)  # the SCM has no wait; its own tools poll too

    async def start(self, name: str) -> None:
        await self._sc("start", name, ALREADY_RUNNING_RC)
        await self._wait_for(name, ServiceState.RUNNING)

    async def stop(self, name: str) -> None:
        await self._sc("stop", name, NOT_STARTED_RC)
        await self._wait_for(name, ServiceState.STOPPED)

    async def restart(self, name: str) -> None:
        await self.stop(name)
        await self.start(name)
