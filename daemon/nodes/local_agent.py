"""This machine's agent as a supervised child process of the daemon.

``LocalAgentProcess`` runs ``python -m agent`` (or the frozen program's ``agent`` command) and
restarts it when it dies; the daemon reaches it over the same mutual TLS as any remote agent, through
an ``AgentLink`` under the node id ``local`` (one code path).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

from agent.api.program import program_argv

_LOGGER = logging.getLogger(__name__)


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
        with open(self._log_path, "ab") as log:  # noqa: ASYNC230 - a local log file, opened once per spawn
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
