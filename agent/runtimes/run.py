"""One run of a runtime process: its port, key and log, readiness, exit and stop.

Readiness is ``GET /health`` answering 200 (llama-server answers 503 while it loads). The
startup deadline is silence, not total time: it moves forward while the log file keeps growing,
so a big model that is visibly loading is not killed for being big.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp

from agent.logring import LogTailer
from agent.records import ProcessRecord
from agent.runtimes.checks import (
    ILLEGAL_INSTRUCTION,
    RuntimeChecks,
    is_illegal_instruction,
)
from agent.runtimes.process import RuntimeProcess, describe_exit

_LOGGER = logging.getLogger(__name__)

HEALTH_POLL_S = 0.1
HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=2, connect=1)
CHECK_TIMEOUT_S = 15.0  # a build that loaded but cannot give one token by then stays unchecked
FAILURE_LINES = 20


class StartFailed(Exception):
    """A runtime did not become ready; ``str()`` is the honest reason."""

    def __init__(self, message: str, lines: list[str], exit_code: int | None = None) -> None:
        super().__init__(message)
        self.lines = lines
        self.exit_code = exit_code


@dataclass(frozen=True)
class BuildCheck:
    """The build a run uses, and where its verdict is kept (see ``agent.runtimes.checks``)."""

    checks: RuntimeChecks
    fingerprint: str
    executable: str
    timeout_s: float = CHECK_TIMEOUT_S


class RuntimeRun:
    """A started (or adopted) runtime process and what is needed to reach and stop it."""

    def __init__(self, runtime_name: str, process: RuntimeProcess, record: ProcessRecord,
                 tailer: LogTailer, adopted: bool = False, build_check: BuildCheck | None = None) -> None:
        self.runtime_name = runtime_name
        self.process = process
        self.record = record
        self.tailer = tailer
        self.adopted = adopted
        self.build_check = build_check
        tailer.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return self.record.port

    @property
    def api_key(self) -> str:
        return self.record.api_key

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.record.port}"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.record.api_key}"}

    def last_lines(self, count: int = FAILURE_LINES) -> list[str]:
        return self.tailer.lines(count)

    def exit_message(self, code: int | None) -> str:
        """'llama-server exited 1: <last non-empty log line>', or ``ILLEGAL_INSTRUCTION`` on SIGILL."""
        if is_illegal_instruction(code):
            if self.build_check is not None:
                self.build_check.checks.record(self.build_check.fingerprint, "illegal_instruction",
                                               self.build_check.executable, "stopped on SIGILL")
            return ILLEGAL_INSTRUCTION
        last = next((line for line in reversed(self.last_lines()) if line.strip()), "")
        return f"{self.runtime_name} {describe_exit(code)}: {last.strip() or '(no output)'}"

    async def _healthy(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"{self.endpoint}/health", headers=self.auth_headers(),
                                   timeout=HEALTH_TIMEOUT) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _answers_with_our_key(self, session: aiohttp.ClientSession) -> bool | None:
        """``/health`` is public: a server already on this port (another agent's runtime, say) would
        pass it. ``/slots`` needs the key, so only our own runtime answers it (None: cannot tell)."""
        try:
            async with session.get(f"{self.endpoint}/slots", headers=self.auth_headers(),
                                   timeout=HEALTH_TIMEOUT) as resp:
                if resp.status in (401, 403):
                    return False
                return True if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def wait_ready(self, session: aiohttp.ClientSession, startup_timeout_s: float) -> None:
        """Return once ``/health`` says ready; raise ``StartFailed`` on exit or silence."""
        while True:
            if self.process.poll():
                code = await self.wait_exit()
                raise StartFailed(self.exit_message(code), self.last_lines(), code)
            if await self._healthy(session):
                if await self._answers_with_our_key(session) is False:
                    # Another server took the port between our probe and the runtime's bind: not ready;
                    # the runtime exits when its bind fails, and that exit is the honest failure.
                    _LOGGER.warning("port %d answers /health but not with this instance's key", self.port)
                    await asyncio.sleep(HEALTH_POLL_S)
                    continue
                self.record.process_exe = self.process.executable() or self.record.process_exe
                self.tailer.read_available()  # the lines that announced readiness, for whoever looks now
                return
            silent_for = time.monotonic() - self.tailer.last_growth
            if silent_for > startup_timeout_s and not self.process.poll():
                last = next((line for line in reversed(self.last_lines()) if line.strip()), "(no output)")
                raise StartFailed(f"{self.runtime_name} was not ready and wrote nothing for "
                                  f"{startup_timeout_s:g} s; last line: {last.strip()}", self.last_lines())
            await asyncio.sleep(HEALTH_POLL_S)

    async def check_build(self, session: aiohttp.ClientSession) -> None:
        """First sight of this build: one one-token generation; an answer records it as ``ok``.

        Done before the run counts as ready, so "ready" has generated and the first user request
        finds every slot free. No answer in time leaves the build unchecked (next start asks again).
        """
        check = self.build_check
        if check is None or check.checks.verdict(check.fingerprint) is not None:
            return
        try:
            async with session.post(f"{self.endpoint}/v1/completions", headers=self.auth_headers(),
                                    json={"prompt": "Hello", "max_tokens": 1, "temperature": 0},
                                    timeout=aiohttp.ClientTimeout(total=check.timeout_s, connect=5)) as resp:
                body = await resp.json(content_type=None)
                if resp.status == 200 and isinstance(body, dict) and body.get("choices"):
                    check.checks.record(check.fingerprint, "ok", check.executable, "one-token generation")
                    return
                _LOGGER.info("runtime check of %s inconclusive: HTTP %d", check.executable, resp.status)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            # A build that dies here is recorded by the exit path (SIGILL); anything else: next time.
            _LOGGER.info("runtime check of %s inconclusive: %s", check.executable, exc)

    async def wait_exit(self) -> int | None:
        code = await self.process.wait()
        self.tailer.flush()
        await self.tailer.stop()
        return code

    async def terminate(self, timeout: float) -> int | None:
        """Stop the process group (SIGTERM, SIGKILL after ``timeout``) and stop tailing."""
        code = await self.process.terminate(timeout)
        self.tailer.flush()
        await self.tailer.stop()
        return code

    async def close(self) -> None:
        """Stop watching (the agent is going away); the process keeps running."""
        await self.tailer.stop()
