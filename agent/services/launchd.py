"""launchd jobs of the system domain on macOS through ``launchctl``.

- list: the ``services = { ... }`` block of ``launchctl print system`` (one job a line: PID, 0
  when it does not run; the last exit status, ``-`` when it never exited; the label), plus the
  LaunchDaemons plists not loaded now (stopped).
- status: ``launchctl print system/LABEL``: its top-level ``key = value`` lines (``state``, ``pid``,
  ``path``, ``last exit code``); exit 113 "Could not find service" is no such job, unless its
  plist is in ``/Library/LaunchDaemons`` (booted out: stopped).
- start ``kickstart system/LABEL`` (after ``bootstrap system PLIST`` when it is not loaded), stop
  ``bootout system/LABEL`` (a KeepAlive job would come straight back from a kill), restart
  ``kickstart -k system/LABEL``.
"""

from __future__ import annotations

import plistlib
from pathlib import Path

from agent.api.services import ManagerKind, ServiceInfo, ServiceState
from agent.services.manager import (
    ACTION_TIMEOUT_S,
    QUERY_TIMEOUT_S,
    Runner,
    ServiceCommandFailed,
    run_argv,
)

DOMAIN = "system"
LAUNCH_DAEMONS = Path("/Library/LaunchDaemons")
NOT_FOUND_RC = 113
NO_SUCH_PROCESS_RC = 3  # bootout of a job that is not loaded


def parse_print_domain(text: str) -> list[tuple[str, int | None, str]]:
    """The ``services`` block of ``launchctl print system``: (label, pid or None, last exit status)."""
    jobs: list[tuple[str, int | None, str]] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if not inside:
            inside = stripped == "services = {"
            continue
        if stripped == "}":
            break
        cols = stripped.split(None, 2)
        if len(cols) == 3 and cols[0].lstrip("-").isdigit():
            pid = int(cols[0])
            jobs.append((cols[2].strip(), pid if pid > 0 else None, cols[1]))
    return jobs


def parse_print_service(text: str) -> dict[str, str]:
    """The top-level ``key = value`` lines of ``launchctl print system/LABEL`` (nested blocks skipped)."""
    props: dict[str, str] = {}
    depth = 0
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith("{"):
            depth += 1
            continue
        if stripped == "}":
            depth -= 1
            continue
        if depth == 1 and " = " in stripped:
            key, _, value = stripped.partition(" = ")
            props[key] = value
    return props


def _exit_failed(status: str) -> bool:
    try:
        return int(status) != 0
    except ValueError:
        return False  # "-", "(never exited)"


def info_from_print(label: str, props: dict[str, str]) -> ServiceInfo:
    state = props.get("state", "")
    pid = int(props["pid"]) if props.get("pid", "").isdigit() else None
    if state == "running" or pid:
        mapped = ServiceState.RUNNING
    elif state in ("spawn scheduled", "xpcproxy"):
        mapped = ServiceState.STARTING
    elif _exit_failed(props.get("last exit code", "")):
        mapped = ServiceState.FAILED
    else:
        mapped = ServiceState.STOPPED
    detail = state + (f", last exit code {props['last exit code']}" if mapped is ServiceState.FAILED else "")
    return ServiceInfo(name=label, display_name=label, description=props.get("path", ""), state=mapped,
                       detail=detail, pid=pid)


class LaunchdManager:
    kind: ManagerKind = "launchd"

    def __init__(self, runner: Runner = run_argv, daemons_dir: Path = LAUNCH_DAEMONS) -> None:
        self._run = runner
        self._dir = daemons_dir

    def _plists(self) -> dict[str, Path]:
        """Label -> plist of the LaunchDaemons folder (unreadable files skipped)."""
        found: dict[str, Path] = {}
        for path in sorted(self._dir.glob("*.plist")) if self._dir.is_dir() else []:
            try:
                label = plistlib.loads(path.read_bytes()).get("Label")
            except (OSError, ValueError, plistlib.InvalidFileException):
                continue
            if isinstance(label, str):
                found[label] = path
        return found

    async def list(self) -> list[ServiceInfo]:
        done = await self._run(["launchctl", "print", DOMAIN], QUERY_TIMEOUT_S)
        if done.returncode != 0:
            raise ServiceCommandFailed(f"launchctl print {DOMAIN}: {done.words()}")
        found: dict[str, ServiceInfo] = {}
        for label, pid, status in parse_print_domain(done.stdout):
            state = ServiceState.RUNNING if pid else ServiceState.FAILED if _exit_failed(status) \
                else ServiceState.STOPPED
            found[label] = ServiceInfo(name=label, display_name=label, state=state, pid=pid,
                                       detail="running" if pid else f"last exit status {status}")
        for label, path in self._plists().items():
            found.setdefault(label, ServiceInfo(name=label, display_name=label, description=str(path),
                                                state=ServiceState.STOPPED, detail="not loaded", enabled=False))
        return sorted(found.values(), key=lambda i: i.name)

    async def status(self, name: str) -> ServiceInfo | None:
        done = await self._run(["launchctl", "print", f"{DOMAIN}/{name}"], QUERY_TIMEOUT_S)
        if done.returncode == NOT_FOUND_RC or "Could not find service" in done.stderr + done.stdout:
            path = self._plists().get(name)
            if path is None:
                return None
            return ServiceInfo(name=name, display_name=name, description=str(path), state=ServiceState.STOPPED,
                               detail="not loaded", enabled=False)
        if done.returncode != 0:
            raise ServiceCommandFailed(f"launchctl print: {done.words()}")
        return info_from_print(name, parse_print_service(done.stdout))

    async def _launchctl(self, *args: str, ok: tuple[int, ...] = (0,)) -> None:
        done = await self._run(["launchctl", *args], ACTION_TIMEOUT_S)
        if done.returncode not in ok:
            raise ServiceCommandFailed(done.words())

    async def start(self, name: str) -> None:
        loaded = await self._run(["launchctl", "print", f"{DOMAIN}/{name}"], QUERY_TIMEOUT_S)
        if loaded.returncode != 0:
            path = self._plists().get(name)
            if path is None:
                raise ServiceCommandFailed(f"{name} is not loaded and has no plist in {self._dir}")
            await self._launchctl("bootstrap", DOMAIN, str(path))
        await self._launchctl("kickstart", f"{DOMAIN}/{name}")

    async def stop(self, name: str) -> None:
        await self._launchctl("bootout", f"{DOMAIN}/{name}", ok=(0, NO_SUCH_PROCESS_RC))

    async def restart(self, name: str) -> None:
        await self._launchctl("kickstart", "-k", f"{DOMAIN}/{name}")
