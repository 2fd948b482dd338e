"""The agent's side of a rolling upgrade: receive a build from the daemon, verify it, swap it in, restart.

``POST /agent/v1/upgrade`` carries the artefact's bytes in its body over the daemon's mutual TLS
and what they must be (``agent.api.upgrade.AgentUpgradeOffer``: platform, version, size, SHA-256,
from the daemon's signed feed) in its query. The bytes go to ``upgrades/.{platform}-{version}.partial``;
a build for another platform, a body of another size or another SHA-256 is refused (422) and the
partial deleted, so nothing is replaced. Only then does the ``AgentInstaller`` swap it in; the agent
answers and exits with ``EXIT_RESTART`` (75), which its service unit (``agent.service.units``)
answers by starting it again. Runtimes live in their own sessions, so the next agent adopts them
(``agent.records``: same PID, creation time and executable).

``FileInstaller`` replaces one file (``--upgrade-target``: a single-file agent build) with one
``os.replace``, keeping the previous as ``NAME.old``; without a target the agent says it cannot be
upgraded. ``MIRBADLLM_AGENT_VERSION_FILE`` names a file whose first line is the version the agent
reports (packagers and tests: a test's "build" is such a file, installed over it).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import platform
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Protocol

from aiohttp import web
from pydantic import ValidationError

from agent.api.upgrade import AgentUpgradeAnswer, AgentUpgradeOffer, agent_platform
from agent.problems import AgentProblem, validation_message
from core.file_swap import previous_of, swap_in

_LOGGER = logging.getLogger(__name__)

VERSION_FILE_ENV = "MIRBADLLM_AGENT_VERSION_FILE"
UPGRADE_TARGET_ENV = "MIRBADLLM_AGENT_UPGRADE_TARGET"
CHUNK = 1 << 20


class UpgradeRefused(AgentProblem):
    status = 422
    code = "upgrade_refused"


def reported_version(default: str, environ: Mapping[str, str] | None = None) -> str:
    """The version this agent reports: the first line of ``$MIRBADLLM_AGENT_VERSION_FILE``, else ``default``."""
    path = (os.environ if environ is None else environ).get(VERSION_FILE_ENV)
    if not path:
        return default
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError as exc:
        _LOGGER.warning("cannot read the version file %s (%s); reporting %s", path, exc, default)
        return default
    return text[0].strip() if text and text[0].strip() else default


class AgentInstaller(Protocol):
    @property
    def unsupported(self) -> str | None:
        """Why this agent cannot be upgraded in place (the daemon shows it), or None."""
        ...

    def apply(self, artefact: Path, offer: AgentUpgradeOffer) -> None:
        """Swap the verified ``artefact`` in, so the next start runs it. Blocking."""
        ...


class FileInstaller:
    """Replaces ``target`` with the artefact in one rename; the previous file stays as ``NAME.old``."""

    unsupported: str | None = None

    def __init__(self, target: Path) -> None:
        self.target = target

    @property
    def previous(self) -> Path:
        return previous_of(self.target)

    def apply(self, artefact: Path, offer: AgentUpgradeOffer) -> None:
        try:
            swap_in(artefact, self.target)
        except OSError as exc:
            raise AgentProblem(f"could not replace {self.target}: {exc}", status=500,
                               code="upgrade_failed") from exc
        _LOGGER.info("installed agent %s at %s (previous kept as %s)", offer.version, self.target,
                     self.previous.name)


class UnsupportedInstaller:
    def __init__(self, reason: str) -> None:
        self.unsupported: str | None = reason

    def apply(self, artefact: Path, offer: AgentUpgradeOffer) -> None:
        raise AgentProblem(str(self.unsupported), status=409, code="upgrade_unsupported")


def installer_for(target: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> AgentInstaller:
    """``FileInstaller`` for ``target`` (else ``$MIRBADLLM_AGENT_UPGRADE_TARGET``), else unsupported."""
    target = target or (os.environ if environ is None else environ).get(UPGRADE_TARGET_ENV)
    if target:
        return FileInstaller(Path(target))
    return UnsupportedInstaller("this agent cannot be upgraded in place: it was not started with "
                                "--upgrade-target PATH (the agent build to replace); install the new "
                                "version by hand on that machine")


class AgentUpgrades:
    """Receives, verifies and installs one upgrade at a time, then asks the agent to restart."""

    def __init__(self, folder: Path, installer: AgentInstaller, version: str,
                 on_installed: Callable[[], None] | None = None, this_platform: str | None = None) -> None:
        self.folder = folder
        self.installer = installer
        self.version = version
        self.on_installed = on_installed
        self.platform = this_platform or agent_platform(platform.system(), platform.machine())
        self._lock = asyncio.Lock()
        self.installed: AgentUpgradeOffer | None = None

    async def receive(self, offer: AgentUpgradeOffer, chunks: Callable[[], AsyncIterator[bytes]]) -> AgentUpgradeAnswer:
        """Stream the body from ``chunks`` (an async iterator factory), verify it, install it."""
        if self._lock.locked() or self.installed is not None:
            raise AgentProblem("an upgrade is already being installed on this agent", status=409,
                               code="upgrade_in_progress")
        async with self._lock:
            if self.installer.unsupported:
                raise AgentProblem(self.installer.unsupported, status=409, code="upgrade_unsupported")
            if offer.platform != self.platform:
                raise UpgradeRefused(f"upgrade refused: the build is for {offer.platform}, this node runs "
                                     f"{self.platform or platform.system() + '/' + platform.machine()}; "
                                     "nothing was replaced")
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._prepare)
            partial = self.folder / f".{offer.platform}-{offer.version}.partial"
            try:
                await self._write(partial, offer, chunks)
                await loop.run_in_executor(None, self.installer.apply, partial, offer)
            finally:
                partial.unlink(missing_ok=True)
            self.installed = offer
        _LOGGER.warning("upgraded from %s to %s: restarting so the new build runs", self.version, offer.version)
        return AgentUpgradeAnswer(version=offer.version, previous_version=self.version)

    def _prepare(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in self.folder.glob(".*.partial"):
            stale.unlink(missing_ok=True)

    async def _write(self, partial: Path, offer: AgentUpgradeOffer, chunks: Callable[[], AsyncIterator[bytes]]) -> None:
        loop = asyncio.get_running_loop()
        digest, size = hashlib.sha256(), 0
        with partial.open("wb") as fh:
            async for chunk in chunks():
                size += len(chunk)
                if size > offer.size:
                    raise UpgradeRefused(f"size check failed: the body is larger than the {offer.size} bytes "
                                         "the release feed names; nothing was replaced")
                digest.update(chunk)
                await loop.run_in_executor(None, fh.write, chunk)
            await loop.run_in_executor(None, os.fsync, fh.fileno())
        if size != offer.size:
            raise UpgradeRefused(f"size check failed: received {size} bytes, the release feed names "
                                 f"{offer.size}; nothing was replaced")
        if digest.hexdigest() != offer.sha256:
            raise UpgradeRefused(f"checksum check failed: the build's SHA-256 is {digest.hexdigest()}, the "
                                 f"release feed names {offer.sha256}; nothing was replaced")


UpgradesOf = Callable[[web.Request], AgentUpgrades]


def routes(prefix: str, upgrades_of: UpgradesOf) -> list[web.RouteDef]:
    """``POST {prefix}/upgrade``: the body is the build, the query an ``AgentUpgradeOffer``."""

    async def upgrade(request: web.Request) -> web.StreamResponse:
        upgrades = upgrades_of(request)
        try:
            offer = AgentUpgradeOffer.model_validate(dict(request.query))
        except ValidationError as exc:
            raise UpgradeRefused("not a valid upgrade offer: " + validation_message(exc, "query"),
                                 code="invalid_upgrade") from None
        answer = await upgrades.receive(offer, lambda: request.content.iter_chunked(CHUNK))
        response = web.json_response(answer.model_dump(mode="json"))
        await response.prepare(request)
        await response.write_eof()  # sent before the server that carries it closes
        if upgrades.on_installed is not None:
            upgrades.on_installed()
        return response

    return [web.post(f"{prefix}/upgrade", upgrade)]  # ?platform=&version=&size=&sha256=; body: the build
