"""Links to agents: an instance cache per node kept fresh by long-polling, and the local agent child.

``AgentLink`` is the daemon's view of one node. ``LocalAgentProcess`` runs this machine's agent as a
supervised child process, reached over the same mutual TLS as any remote agent (one code path).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from agent.api.client import AgentClient, AgentError
from agent.api.models import InstanceInfo, TelemetrySample
from agent.api.program import program_argv

_LOGGER = logging.getLogger(__name__)

LONG_POLL_S = 20.0


class AgentLink:
    """One node's agent: its client and the latest instances it reported."""

    def __init__(self, node_id: str, client: AgentClient,
                 on_change: Callable[[str, dict[str, InstanceInfo]], None]) -> None:
        self.node_id = node_id
        self.client = client
        self.instances: dict[str, InstanceInfo] = {}
        self.latest_sample: TelemetrySample | None = None
        self.online = False
        self.last_error: str | None = None
        self._version: int | None = None
        self._on_change = on_change
        self.first_sync = asyncio.Event()
        self.start_lane = asyncio.Lock()  # one start at a time per node

    async def refresh(self) -> None:
        """Fetch the instances now (after a start or stop, not waiting for the long-poll)."""
        page = await self.client.instances()
        self._apply(page.version, page.instances)

    def _apply(self, version: int, instances: list[InstanceInfo]) -> None:
        self._version = version
        self.instances = {i.instance_id: i for i in instances}
        self.online, self.last_error = True, None
        self._on_change(self.node_id, self.instances)
        self.first_sync.set()

    async def run(self) -> None:
        """Long-poll the agent for instance changes until cancelled; reconnect on failure."""
        backoff = 0.2
        while True:
            try:
                page = await self.client.instances(since=self._version if self._version is not None else -1,
                                                   timeout=LONG_POLL_S)
                self._apply(page.version, page.instances)
                backoff = 0.2
            except AgentError as exc:
                # Before the first answer the agent may simply not be listening yet.
                level = logging.WARNING if self.first_sync.is_set() else logging.DEBUG
                if self.online or self.last_error != exc.message:
                    _LOGGER.log(level, "agent %s unreachable: %s", self.node_id, exc.message)
                self.online, self.last_error = False, exc.message
                self._version = None
                self._on_change(self.node_id, self.instances)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalAgentProcess:
    """Runs ``python -m agent`` for this machine and restarts it if it dies.

    Runtimes live in their own sessions, so an agent restart does not touch them: the new agent
    adopts them from its process records.
    """

    def __init__(self, home: Path, log_path: Path, llama_server: str | None,
                 telemetry_interval_s: float = 2.0, first_port: int | None = None) -> None:
        self.home = home
        self._first_port = first_port
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._log_path = log_path
        self._llama_server = llama_server
        self._telemetry_interval_s = telemetry_interval_s
        self.process: asyncio.subprocess.Process | None = None
        self._stopping = False

    def argv(self) -> list[str]:
        argv = program_argv("agent", "--home", str(self.home), "--host", "127.0.0.1",
                            "--port", str(self.port), "--telemetry-interval", str(self._telemetry_interval_s))
        if self._llama_server:
            argv += ["--llama-server", self._llama_server]
        if self._first_port is not None:
            argv += ["--first-port", str(self._first_port)]
        return argv

    async def spawn(self) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv(), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        _LOGGER.info("local agent started (pid %s, %s)", self.process.pid, self.url)

    async def supervise(self) -> None:
        """Restart the agent when it exits unexpectedly, with a growing pause between tries."""
        backoff = 0.5
        while not self._stopping:
            if self.process is None:
                await self.spawn()
            assert self.process is not None
            code = await self.process.wait()
            if self._stopping:
                return
            _LOGGER.error("local agent exited with %s; restarting (log: %s)", code, self._log_path)
            self.process = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    async def stop(self) -> None:
        self._stopping = True
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
