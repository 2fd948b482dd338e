"""After an update: this machine's daemon and its local agent restarted onto the installed version.

An installed update replaces the program, but the daemon the new app finds is still the old
process (it outlives the app on purpose). ``DaemonRestarter`` restarts it with the two halves the
app and ``mirbadllm ctl daemon stop`` already use: ``POST /api/shutdown`` and ``wait_gone`` (the old
process has exited, so the port and the home are free), then ``connect_daemon``, which starts
``mirbadllm daemon`` detached as the app's first launch does, from the program now installed.
The daemon starts its local agent from the same program; models keep running (runtimes live in
their own sessions) and are adopted. The outcome compares the version the new daemon reports with
the installed one, and waits a bounded while for the local agent to report it too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from app.bootstrap import BootstrapError, DaemonConnection, connect_daemon, wait_gone
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import LOCAL_NODE
from daemon.api.program import program_version

_LOGGER = logging.getLogger(__name__)

STOP_WAIT_S = 120.0  # closing waits for open requests (long-polls end within a minute)
AGENT_WAIT_S = 30.0  # the local agent reports a moment after the daemon answers

Starter = Callable[[Path, str], Awaitable[DaemonConnection]]  # (home, url_override) -> a healthy daemon


def older(running: str, installed: str) -> bool:
    """True when ``running`` is an older version than ``installed`` (an unreadable one never is)."""
    try:
        return Version(running) < Version(installed)
    except InvalidVersion:
        return False


@dataclass(frozen=True)
class RestartOutcome:
    installed: str
    version: str  # what the restarted daemon reports
    agent_version: str | None  # its local agent's; None without one or when it did not report in time
    url: str
    seconds: float  # from the shutdown request to the new daemon answering with its version

    @property
    def ok(self) -> bool:
        return self.version == self.installed and self.agent_version in (None, self.installed)

    @property
    def message(self) -> str:
        if self.version != self.installed:
            return (f"The daemon restarted but runs {self.version}, not the installed {self.installed}: "
                    "another copy of MirbadLLM may be starting it; quit it and open this one again.")
        if self.agent_version not in (None, self.installed):
            return (f"Now running {self.version}, but this machine's agent still reports {self.agent_version}: "
                    "see the daemon's logs/agent.log.")
        return f"Now running {self.version}"


async def _connect(home: Path, url_override: str) -> DaemonConnection:
    return await connect_daemon(home, url_override=url_override, allow_start=True)


class DaemonRestarter:
    """Restarts the daemon of ``home`` (on this machine only: the app may start it)."""

    def __init__(self, home: Path, url_override: str = "", *, installed_version: str | None = None,
                 start: Starter = _connect, stop_wait_s: float = STOP_WAIT_S,
                 agent_wait_s: float = AGENT_WAIT_S) -> None:
        self.home = home
        self.url_override = url_override
        self.installed_version = installed_version or program_version()
        self._start = start
        self._stop_wait_s = stop_wait_s
        self._agent_wait_s = agent_wait_s

    async def restart(self, client: DaemonClient) -> RestartOutcome:
        """Stop the running daemon, start the installed one, and say what it reports. Raises
        ``DaemonError`` when the old one would not stop, ``BootstrapError`` when the new one did not start."""
        began = time.monotonic()
        if await client.healthz():
            answer = await client.shutdown()
            pid = answer.get("pid")
            if not await wait_gone(client, pid if isinstance(pid, int) else None, self._stop_wait_s):
                raise DaemonError(0, "restart_failed", f"The daemon (pid {pid}) is still running after "
                                  f"{self._stop_wait_s:.0f} s; stop it with `mirbadllm ctl daemon stop` and "
                                  "open MirbadLLM again.")
        _LOGGER.info("starting the daemon onto %s", self.installed_version)
        conn = await self._start(self.home, self.url_override)
        fresh = DaemonClient(conn.url, conn.token, client_name="app")  # the port may differ (port = 0)
        try:
            version = (await fresh.status()).daemon.version
            seconds = time.monotonic() - began
            agent = await self._local_agent_version(fresh, version)
        finally:
            await fresh.close()
        outcome = RestartOutcome(self.installed_version, version, agent, conn.url, seconds)
        _LOGGER.info("daemon restarted in %.1f s: %s", seconds, outcome.message)
        return outcome

    async def _local_agent_version(self, client: DaemonClient, wanted: str) -> str | None:
        """The local agent's version once it reports ``wanted`` (or what it reports at the deadline)."""
        deadline = time.monotonic() + self._agent_wait_s
        seen: str | None = None
        while True:
            nodes = await client.list_nodes()
            local = next((n for n in nodes if n.id == LOCAL_NODE), None)
            if local is None:
                return None  # a master without a local agent
            seen = local.version or seen
            if seen == wanted or time.monotonic() >= deadline:
                return seen
            await asyncio.sleep(0.25)


__all__ = ["BootstrapError", "DaemonRestarter", "RestartOutcome", "older"]
