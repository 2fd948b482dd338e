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
``os.replace``, keeping the previous as ``NAME.old``. ``DebInstaller`` is the agent the Debian package
installed (its unit passes ``--installed-by deb``; said, not guessed from paths): it takes the
release's package (``linux-x86_64-deb``), moves it to ``LINUX_DEB_UPGRADE_FILE`` and starts the
package's oneshot unit ``mirbadllm-agent-upgrade.service``, the one thing the package's polkit rule
lets the agent's user do; its root helper checks the file and installs it with the package manager
(``installers.linux_deb``). Not sudo: the agent's unit has ``NoNewPrivileges=yes``. Each installer
takes only its own artefact: a file agent refuses the package, a .deb agent the single-file build.
Without either the agent says it cannot be upgraded. ``MIRBADLLM_AGENT_VERSION_FILE`` names a file whose first line is the version the agent
reports (packagers and tests: a test's "build" is such a file, installed over it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from aiohttp import web

from agent.api.upgrade import (
    AgentUpgradeAnswer,
    AgentUpgradeOffer,
    agent_platform,
    deb_platform,
)
from agent.problems import AgentProblem
from agent.service.units import LINUX_DEB_UPGRADE_FILE, LINUX_UPGRADE_UNIT
from agent.uploads import body_chunks, clear_stale, offer_from_query, receive_exact
from core.file_swap import previous_of, swap_in

_LOGGER = logging.getLogger(__name__)

VERSION_FILE_ENV = "MIRBADLLM_AGENT_VERSION_FILE"
UPGRADE_TARGET_ENV = "MIRBADLLM_AGENT_UPGRADE_TARGET"
# Tests: where a .deb agent leaves the package (the package's unit and helper read only the fixed one).
DEB_UPGRADE_FILE_ENV = "MIRBADLLM_AGENT_DEB_UPGRADE_FILE"


class UpgradeRefused(AgentProblem, status=422, code="upgrade_refused"):
    pass


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

    @property
    def takes(self) -> str | None:
        """The feed's platform key it installs; None: this machine's agent build."""
        ...

    def apply(self, artefact: Path, offer: AgentUpgradeOffer) -> None:
        """Swap the verified ``artefact`` in, so the next start runs it. Blocking."""
        ...


class FileInstaller:
    """Replaces ``target`` with the artefact in one rename; the previous file stays as ``NAME.old``."""

    unsupported: str | None = None
    takes: str | None = None

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


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


class DebInstaller:
    """The .deb's agent: the verified package goes to ``package`` and the package's upgrade unit,
    started through systemd (polkit: this unit, verb start, the agent's user only), installs it."""

    unsupported: str | None = None

    def __init__(self, package: Path = Path(LINUX_DEB_UPGRADE_FILE), machine: str | None = None,
                 run: Runner = run_command) -> None:
        self.package = package
        self.takes: str | None = deb_platform(machine or platform.machine())
        self._run = run

    def start_argv(self) -> list[str]:
        return ["systemctl", "start", LINUX_UPGRADE_UNIT]

    def apply(self, artefact: Path, offer: AgentUpgradeOffer) -> None:
        os.replace(artefact, self.package)
        try:
            result = self._run(self.start_argv())
        except OSError as exc:
            result = subprocess.CompletedProcess(self.start_argv(), 127, "", str(exc))
        finally:
            self.package.unlink(missing_ok=True)  # the helper installed its own copy, or failed
        if result.returncode != 0:
            said = (result.stderr or result.stdout or "").strip().splitlines()
            raise AgentProblem(f"the package manager did not install {offer.version} "
                               f"({' '.join(self.start_argv())} exited {result.returncode}"
                               f"{': ' + said[-1] if said else ''}); this node still runs the previous version",
                               status=500, code="upgrade_failed")
        _LOGGER.info("installed the package of agent %s through %s", offer.version, LINUX_UPGRADE_UNIT)


class UnsupportedInstaller:
    takes: str | None = None

    def __init__(self, reason: str) -> None:
        self.unsupported: str | None = reason

    def apply(self, artefact: Path, offer: AgentUpgradeOffer) -> None:
        raise AgentProblem(str(self.unsupported), status=409, code="upgrade_unsupported")


def installer_for(target: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None,
                  installed_by: str | None = None, folder: Path | None = None) -> AgentInstaller:
    """``DebInstaller`` for an agent the .deb installed (its upgrades ``folder`` must be the one the
    package's helper reads), ``FileInstaller`` for ``target`` (else ``$MIRBADLLM_AGENT_UPGRADE_TARGET``),
    else unsupported."""
    environ = os.environ if environ is None else environ
    if installed_by == "deb":
        package = Path(environ.get(DEB_UPGRADE_FILE_ENV) or LINUX_DEB_UPGRADE_FILE)
        if folder is not None and folder != package.parent:
            return UnsupportedInstaller(f"this agent was installed from the .deb but keeps its upgrades in {folder}; "
                                        f"the package's helper installs only from {package.parent} (run it with "
                                        "the package's service unit), or upgrade with apt on that machine")
        return DebInstaller(package)
    target = target or environ.get(UPGRADE_TARGET_ENV)
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
            takes = self.installer.takes or self.platform
            if offer.platform != takes and offer.platform.endswith("-deb"):
                raise UpgradeRefused(f"upgrade refused: {offer.platform} is the Debian package and this agent was "
                                     f"not installed from it (it takes {takes or 'no build'}); nothing was replaced")
            if offer.platform != takes:
                raise UpgradeRefused(f"upgrade refused: the build is for {offer.platform}, this node takes "
                                     f"{takes or platform.system() + '/' + platform.machine()}; "
                                     "nothing was replaced")
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, clear_stale, self.folder, ".*.partial")
            partial = self.folder / f".{offer.platform}-{offer.version}.partial"
            try:
                await receive_exact(partial, offer.size, offer.sha256, chunks, UpgradeRefused,
                                    named_by="the release feed", what="the build", nothing="nothing was replaced")
                await loop.run_in_executor(None, self.installer.apply, partial, offer)
            finally:
                partial.unlink(missing_ok=True)
            self.installed = offer
        _LOGGER.warning("upgraded from %s to %s: restarting so the new build runs", self.version, offer.version)
        return AgentUpgradeAnswer(version=offer.version, previous_version=self.version)


UpgradesOf = Callable[[web.Request], AgentUpgrades]


def routes(prefix: str, upgrades_of: UpgradesOf) -> list[web.RouteDef]:
    """``POST {prefix}/upgrade``: the body is the build, the query an ``AgentUpgradeOffer``."""

    async def upgrade(request: web.Request) -> web.StreamResponse:
        upgrades = upgrades_of(request)
        offer = offer_from_query(request, AgentUpgradeOffer,
                                 lambda why: UpgradeRefused(f"not a valid upgrade offer: {why}", code="invalid_upgrade"))
        answer = await upgrades.receive(offer, body_chunks(request))
        response = web.json_response(answer.model_dump(mode="json"))
        await response.prepare(request)
        await response.write_eof()  # sent before the server that carries it closes
        if upgrades.on_installed is not None:
            upgrades.on_installed()
        return response

    return [web.post(f"{prefix}/upgrade", upgrade)]  # ?platform=&version=&size=&sha256=; body: the build
