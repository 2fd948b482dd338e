"""``ServiceManager``: the seam between the agent and the OS's service manager.

One implementation per OS (``agent.services.systemd``, ``launchd``, ``scm``) and ``NoServiceManager``
where none can be driven; tests hand in a fake. The ones that shell out take a ``Runner`` (argv in,
exit code and output out), so their argv and parsers are tested against recorded outputs.
``agent.services.platforms.platform_manager`` picks the one for this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from agent.api.services import ManagerKind, ServiceInfo

ACTION_TIMEOUT_S = 60.0
QUERY_TIMEOUT_S = 15.0


class ServiceCommandFailed(Exception):
    """The service manager refused or failed an action; ``message`` is its own words, trimmed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServiceManager(Protocol):
    kind: ManagerKind

    async def list(self) -> list[ServiceInfo]:
        """Every service the manager knows (policy fields left at their defaults)."""

    async def status(self, name: str) -> ServiceInfo | None:
        """The service called ``name`` (or one of its aliases), None when there is none."""

    async def start(self, name: str) -> None: ...
    async def stop(self, name: str) -> None: ...
    async def restart(self, name: str) -> None: ...


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str = ""

    def words(self) -> str:
        """What the command said about its failure, one short line."""
        text = (self.stderr.strip() or self.stdout.strip()).replace("\r", "")
        return " ".join(text.split())[:400] or f"exit code {self.returncode}"


Runner = Callable[[list[str], float], Awaitable[Completed]]


async def run_argv(argv: list[str], timeout: float) -> Completed:
    """Run ``argv`` (no shell), its output decoded; a timeout kills it and fails."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={**os.environ, "LC_ALL": "C", "SYSTEMD_COLORS": "0"})
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise ServiceCommandFailed(f"{argv[0]} {argv[1] if len(argv) > 1 else ''} gave no answer in "
                                   f"{timeout:.0f} s") from None
    return Completed(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


class NoServiceManager:
    """This machine has no service manager the agent can drive: nothing listed, every action refused."""

    kind: ManagerKind = "none"

    def __init__(self, why: str) -> None:
        self.why = why

    async def list(self) -> list[ServiceInfo]:
        return []

    async def status(self, name: str) -> ServiceInfo | None:
        return None

    async def start(self, name: str) -> None:
        raise ServiceCommandFailed(self.why)

    async def stop(self, name: str) -> None:
        raise ServiceCommandFailed(self.why)

    async def restart(self, name: str) -> None:
        raise ServiceCommandFailed(self.why)
