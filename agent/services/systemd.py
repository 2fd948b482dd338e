"""systemd system units through ``systemctl``, its machine-readable forms only.

- list: unit names from ``list-units --type=service --all`` and ``list-unit-files --type=service``
  (``--plain --no-legend``: one unit a line, first column its name; templates without an instance
  and alias files are left out, their target lists the alias), then ``show -p ...`` in batches.
- status: ``show -p Id,Names,Description,LoadState,ActiveState,SubState,UnitFileState,MainPID -- NAME``:
  ``Key=value`` lines, units apart by a blank line, ``Names`` holding every alias; ``LoadState=not-found``
  is no such unit.
- actions: ``systemctl --no-ask-password start|stop|restart -- NAME``, waited for (60 s): the answer
  is the state afterwards. ``--no-ask-password`` never waits on a polkit prompt: without the right
  the agent is told "Interactive authentication required" and says so.
"""

from __future__ import annotations

from agent.api.services import ManagerKind, ServiceInfo, ServiceState
from agent.services.manager import (
    ACTION_TIMEOUT_S,
    QUERY_TIMEOUT_S,
    Runner,
    ServiceCommandFailed,
    run_argv,
)

PROPERTIES = ("Id", "Names", "Description", "LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID")
SHOW_BATCH = 100
_STATES = {"active": ServiceState.RUNNING, "reloading": ServiceState.RUNNING, "inactive": ServiceState.STOPPED,
           "activating": ServiceState.STARTING, "deactivating": ServiceState.STOPPING,
           "failed": ServiceState.FAILED}
_ENABLED = {"enabled": True, "enabled-runtime": True, "linked": True, "linked-runtime": True,
            "disabled": False, "masked": False, "masked-runtime": False}


def show_argv(names: list[str]) -> list[str]:
    return ["systemctl", "show", "--no-pager", "-p", ",".join(PROPERTIES), "--", *names]


def parse_show(text: str) -> list[dict[str, str]]:
    """``systemctl show`` output as one dict per unit (blank lines part them)."""
    units: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                units.append(current)
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key.strip()] = value
    if current:
        units.append(current)
    return units


def info_from_show(props: dict[str, str]) -> ServiceInfo | None:
    """One unit's properties as a ``ServiceInfo``; None for a unit systemd does not have."""
    if props.get("LoadState") in ("not-found", "", None) or not props.get("Id"):
        return None
    name = props["Id"]
    aliases = [n for n in props.get("Names", "").split() if n != name]
    sub = props.get("SubState", "")
    pid = int(props["MainPID"]) if props.get("MainPID", "0").isdigit() and props.get("MainPID") != "0" else None
    return ServiceInfo(name=name, display_name=name.removesuffix(".service"),
                       description=props.get("Description", ""), aliases=aliases,
                       state=_STATES.get(props.get("ActiveState", ""), ServiceState.UNKNOWN),
                       detail=f"{props.get('ActiveState', '')} ({sub})" if sub else props.get("ActiveState", ""),
                       enabled=_ENABLED.get(props.get("UnitFileState", "")), pid=pid)


def parse_unit_names(text: str, files: bool) -> list[str]:
    """First column of ``list-units``/``list-unit-files --plain --no-legend``: service names, without
    bare templates (``foo@.service``) and, for unit files, without aliases (listed by their target)."""
    names: list[str] = []
    for line in text.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] in ("●", "*"):  # a failed unit's marker, should --plain not strip it
            cols = cols[1:]
        if not cols or not cols[0].endswith(".service") or cols[0].endswith("@.service"):
            continue
        if files and len(cols) > 1 and cols[1] == "alias":
            continue
        names.append(cols[0])
    return names


class SystemdManager:
    kind: ManagerKind = "systemd"

    def __init__(self, runner: Runner = run_argv) -> None:
        self._run = runner

    async def _query(self, argv: list[str]) -> str:
        done = await self._run(argv, QUERY_TIMEOUT_S)
        if done.returncode != 0:
            raise ServiceCommandFailed(f"{' '.join(argv[:3])}: {done.words()}")
        return done.stdout

    async def list(self) -> list[ServiceInfo]:
        loaded = parse_unit_names(await self._query(
            ["systemctl", "list-units", "--type=service", "--all", "--plain", "--no-legend", "--no-pager"]), False)
        files = parse_unit_names(await self._query(
            ["systemctl", "list-unit-files", "--type=service", "--plain", "--no-legend", "--no-pager"]), True)
        names = list(dict.fromkeys([*loaded, *files]))
        found: dict[str, ServiceInfo] = {}
        for start in range(0, len(names), SHOW_BATCH):
            for props in parse_show(await self._query(show_argv(names[start:start + SHOW_BATCH]))):
                info = info_from_show(props)
                if info is not None:
                    found.setdefault(info.name, info)  # an alias shows its target again
        return sorted(found.values(), key=lambda i: i.name)

    async def status(self, name: str) -> ServiceInfo | None:
        units = parse_show(await self._query(show_argv([name])))
        return info_from_show(units[0]) if units else None

    async def _act(self, verb: str, name: str) -> None:
        done = await self._run(["systemctl", "--no-ask-password", verb, "--", name], ACTION_TIMEOUT_S)
        if done.returncode != 0:
            raise ServiceCommandFailed(done.words())

    async def start(self, name: str) -> None:
        await self._act("start", name)

    async def stop(self, name: str) -> None:
        await self._act("stop", name)

    async def restart(self, name: str) -> None:
        await self._act("restart", name)
