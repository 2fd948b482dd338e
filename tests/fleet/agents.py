"""Agents as separate processes (``python -m agent``), each with its own home and port.

``AgentProcess`` reads the agent's JSON events from its stdout (``listening``, ``pairing``,
``paired``, ``unpaired``) so tests wait on what the agent says, never on a clock. Its stderr goes
to ``{home}/agent.stderr`` for the failure report. ``stop`` ends the agent and the runtimes it
recorded (they outlive the agent by design).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

_LOGGER = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class AgentProcess:
    process: asyncio.subprocess.Process
    home: Path
    host: str
    events: list[dict[str, Any]] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _reader: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self.last("listening")["port"])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def code(self) -> str:
        return str(self.last("pairing")["code"])

    @property
    def fingerprint(self) -> str:
        return str(self.last("pairing")["fingerprint"])

    def last(self, kind: str) -> dict[str, Any]:
        found = [e for e in self.events if e.get("event") == kind]
        if not found:
            raise AssertionError(f"the agent in {self.home} has not said '{kind}' yet; said: {self.events}")
        return found[-1]

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def wait_event(self, kind: str, after: int = 0, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        """The first ``kind`` event at index ``after`` or later whose fields equal ``match``."""
        def found() -> dict[str, Any] | None:
            for event in self.events[after:]:
                if event.get("event") == kind and all(event.get(k) == v for k, v in match.items()):
                    return event
            return None

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(
                    lambda: found() is not None or self.process.returncode is not None), timeout)
            except TimeoutError:
                pass
        event = found()
        if event is None:
            raise AssertionError(f"agent in {self.home} did not say {kind} {match} within {timeout} s "
                                 f"(exit {self.process.returncode}); said {self.events}\n{self.stderr()}")
        return event

    def stderr(self) -> str:
        try:
            return (self.home / "agent.stderr").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def runtime_pids(self) -> list[int]:
        try:
            data = json.loads((self.home / "processes.json").read_text())
        except (OSError, ValueError):
            return []
        return [int(r["pid"]) for r in data.get("processes", [])]

    async def terminate(self) -> int:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        return int(self.process.returncode or 0)

    async def stop(self) -> None:
        """End the agent and every runtime it recorded."""
        pids = self.runtime_pids()
        await self.terminate()
        kill_runtimes(pids + self.runtime_pids())


def kill_runtimes(pids: list[int]) -> None:
    for pid in set(pids):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if "fake_llama_server" not in " ".join(proc.cmdline()) and "llama-server" not in proc.name():
                continue  # the PID was reused by something that is not ours
            if os.getpgid(pid) == pid:  # runtimes lead their own session: end the whole group
                os.killpg(pid, signal.SIGKILL)
            else:
                proc.kill()


def _log_file(path: Path) -> Any:
    return open(path, "ab")  # handed to the child, closed once it has it


async def spawn_agent(home: Path, *, name: str, llama_server: Path | None, host: str = "127.0.0.1",
                      port: int = 0, first_port: int | None = None, netns: str | None = None,
                      extra: list[str] | None = None, env: dict[str, str] | None = None) -> AgentProcess:
    """Start ``python -m agent``; returns once it listens."""
    home.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "agent", "--home", str(home), "--host", host, "--port", str(port),
            "--name", name, "--telemetry-interval", "0.5", *(extra or [])]
    if llama_server is not None:
        argv += ["--llama-server", str(llama_server)]
    if first_port is not None:
        argv += ["--first-port", str(first_port)]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    stderr = _log_file(home / "agent.stderr")
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=str(ROOT), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=stderr, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    finally:
        stderr.close()
    agent = AgentProcess(process, home, host)
    agent._reader = asyncio.ensure_future(agent._read())
    await agent.wait_event("listening")
    return agent


async def eventually(probe: Any, timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Re-evaluate ``probe`` (sync or async) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {value!r}")
        await asyncio.sleep(interval)
