"""The agent's side of a llama.cpp build rollout: receive, verify, unpack beside, smoke, switch.

``POST /agent/v1/runtimes/llamacpp`` carries a gzip'd tar of one build folder as ``make runtime``
writes it (``llamacpp-<version>-<key>/``: ``runtime.json``, ``bin/llama-server``, the ggml
libraries), over the daemon's mutual TLS, with a ``LlamaCppBuildOffer`` in its query
(``agent.api.runtime_builds``). In order, each step refusing with nothing installed:

1. the body is streamed to ``runtimes/.{name}.partial``, capped at the offer's size, and must
   have its exact size and SHA-256;
2. it is unpacked into ``runtimes/.{name}.staging/``: regular files, folders and links to a file
   name in the same folder only, no absolute or ``..`` path, at most ``MAX_UNPACKED_BYTES``;
3. every file of the build is checked against ``runtime.json``: each listed file has its SHA-256,
   no file is unlisted, the manifest is llama.cpp of the offered version for this system and
   machine (``agent.runtimes.catalog.read_build``);
4. the folder is renamed to ``runtimes/{name}/``, beside the build the agent runs now, never over
   it (a folder of that name that is not the same build is refused);
5. the smoke test: the new ``llama-server`` loads the offer's ``smoke_model`` on a free loopback
   port and must generate one token (``agent.runtimes.llamacpp.one_token``, the build check's
   request); it is stopped either way;
6. only then does ``runtimes/preferred.json`` name it (``PreferredBuild.switch``): new starts use
   it; running instances keep the build they started with. A failed smoke removes the new folder
   and leaves the preferred build as it was (422 ``runtime_smoke_failed``, with its last lines).

An agent started with ``--llama-server PATH`` always runs that path, so it refuses a rollout
(409 ``runtime_configured``). One rollout at a time per agent (409 ``runtime_upgrade_in_progress``).
Old builds stay in ``runtimes/`` (the previous one is named in ``preferred.json``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import shutil
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path, PurePosixPath

import aiohttp
from aiohttp import web

from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import LaunchSpec
from agent.api.runtime_builds import (
    MAX_UNPACKED_BYTES,
    RUNTIME_BUILD_PATH,
    LlamaCppBuildAnswer,
    LlamaCppBuildOffer,
)
from agent.logring import LogRing
from agent.paths import AgentPaths
from agent.problems import AgentProblem
from agent.runtimes.catalog import (
    RUNTIME_MANIFEST,
    PreferredBuild,
    RuntimeCatalog,
    RuntimeExecutable,
    read_build,
)
from agent.runtimes.driver import NoRuntime, RuntimeUnusable, SpecRejected, StartFailed
from agent.runtimes.llamacpp import LlamaCppDriver, check_model_file, one_token, serves
from agent.runtimes.ports import find_free_port
from agent.uploads import body_chunks, clear_stale, offer_from_query, receive_exact
from core.hashing import file_sha256

_LOGGER = logging.getLogger(__name__)

SMOKE_TIMEOUT_S = 120.0  # silence allowed while the smoke model loads, and for its one token
SMOKE_ID = "runtime-smoke"


class BuildRefused(AgentProblem, status=422, code="runtime_build_refused"):
    pass


class SmokeFailed(AgentProblem, status=422, code="runtime_smoke_failed"):
    pass


def unpack(archive: Path, name: str, into: Path) -> Path:
    """Unpack the build ``name`` from ``archive`` into ``into``; the build's folder. Blocking."""
    total = 0
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                parts = PurePosixPath(member.name).parts
                if member.name.startswith("/") or ".." in parts or not parts or parts[0] != name:
                    raise BuildRefused(f"build refused: the archive holds {member.name!r}, outside the folder "
                                       f"{name}/; nothing was installed")
                if member.issym():
                    if "/" in member.linkname or member.linkname in ("", ".", ".."):
                        raise BuildRefused(f"build refused: {member.name} links to {member.linkname!r}, not to a "
                                           "file beside it; nothing was installed")
                elif not (member.isfile() or member.isdir()):
                    raise BuildRefused(f"build refused: {member.name} is neither a file, a folder nor a link; "
                                       "nothing was installed")
                total += member.size if member.isfile() else 0
                if total > MAX_UNPACKED_BYTES:
                    raise BuildRefused(f"build refused: it unpacks to more than {MAX_UNPACKED_BYTES >> 30} GiB; "
                                       "nothing was installed")
            into.mkdir(parents=True)
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildRefused(f"build refused: the archive cannot be unpacked ({exc}); nothing was installed") from exc
    return into / name


def verify(folder: Path, offer: LlamaCppBuildOffer) -> RuntimeExecutable:
    """Every file of the unpacked build against its ``runtime.json``; the build's server. Blocking."""
    try:
        manifest = json.loads((folder / RUNTIME_MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BuildRefused(f"build refused: no readable {RUNTIME_MANIFEST} ({exc}); nothing was installed") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        raise BuildRefused(f"build refused: its {RUNTIME_MANIFEST} lists no files; nothing was installed")
    if manifest.get("version") != offer.version:
        raise BuildRefused(f"build refused: its {RUNTIME_MANIFEST} says version {manifest.get('version')}, the "
                           f"rollout says {offer.version}; nothing was installed")
    for rel, digest in sorted(files.items()):
        path = folder / str(rel)
        if Path(str(rel)).is_absolute() or ".." in Path(str(rel)).parts:
            raise BuildRefused(f"build refused: its {RUNTIME_MANIFEST} names {rel!r}, outside the build")
        if path.is_symlink() or not path.is_file():
            raise BuildRefused(f"build refused: {rel} is listed in {RUNTIME_MANIFEST} but is not in the build; "
                               "nothing was installed")
        if file_sha256(path) != digest:
            raise BuildRefused(f"build refused: {rel} does not have the SHA-256 its {RUNTIME_MANIFEST} names "
                               "(changed after the build was made); nothing was installed", details={"file": rel})
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and rel != RUNTIME_MANIFEST and rel not in files:
            raise BuildRefused(f"build refused: {rel} is not listed in {RUNTIME_MANIFEST}; nothing was installed",
                               details={"file": rel})
    exe = read_build(folder)
    if exe is None:
        raise BuildRefused(f"build refused: it is not a llama.cpp build for {platform.system()}/"
                           f"{platform.machine()} with an executable server; nothing was installed")
    if exe.path.relative_to(folder.resolve()).as_posix() not in files:
        raise BuildRefused(f"build refused: its server {exe.path.name} is not listed in {RUNTIME_MANIFEST}")
    return exe


class LlamaCppBuilds:
    """Installs one rolled-out llama.cpp build at a time beside the others, smoke-tested first."""

    def __init__(self, paths: AgentPaths, catalog: RuntimeCatalog, driver: LlamaCppDriver,
                 taken_ports: Callable[[], list[int]], first_port: int,
                 smoke_timeout_s: float = SMOKE_TIMEOUT_S) -> None:
        if catalog.preferred is None:
            raise ValueError("a catalog without a PreferredBuild cannot take rolled-out builds")
        self.paths = paths
        self.catalog = catalog
        self.preferred: PreferredBuild = catalog.preferred
        self.driver = driver
        self.taken_ports = taken_ports
        self.first_port = first_port
        self.smoke_timeout_s = smoke_timeout_s
        self._lock = asyncio.Lock()

    @property
    def folder(self) -> Path:
        return self.preferred.folder

    async def receive(self, offer: LlamaCppBuildOffer,
                      chunks: Callable[[], AsyncIterator[bytes]]) -> LlamaCppBuildAnswer:
        if self._lock.locked():
            raise AgentProblem("a llama.cpp build is already being installed on this agent", status=409,
                               code="runtime_upgrade_in_progress")
        async with self._lock:
            if self.catalog.configured is not None:
                raise AgentProblem(f"this agent runs the llama-server it was started with ({self.catalog.configured}, "
                                   "--llama-server or MIRBADLLM_LLAMA_SERVER), so a rolled-out build would never "
                                   "be used; start it without one to take rollouts", status=409,
                                   code="runtime_configured")
            try:
                await asyncio.to_thread(check_model_file, offer.smoke_model, None)
            except SpecRejected as exc:
                raise BuildRefused(f"no model to smoke-test the build with: {exc}") from None
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, clear_stale, self.folder, ".*.partial", ".*.staging")
            partial = self.folder / f".{offer.name}.partial"
            staging = self.folder / f".{offer.name}.staging"
            try:
                await receive_exact(partial, offer.size, offer.sha256, chunks, BuildRefused,
                                    named_by="the rollout", what="the archive", nothing="nothing was installed")
                built = await loop.run_in_executor(None, unpack, partial, offer.name, staging)
                await loop.run_in_executor(None, verify, built, offer)
                return await self._install(built, offer)
            finally:
                partial.unlink(missing_ok=True)
                await loop.run_in_executor(None, shutil.rmtree, staging, True)

    async def _install(self, built: Path, offer: LlamaCppBuildOffer) -> LlamaCppBuildAnswer:
        target = self.folder / offer.name
        current = self.preferred.name
        if target.exists():
            same = await asyncio.to_thread(_same_manifest, built, target)
            if not same:
                raise AgentProblem(f"build refused: {target} holds another build of that name; remove it by hand "
                                   "(it is never written over)", status=409, code="runtime_build_conflict")
            if current == offer.name:
                exe = read_build(target)
                digest = await asyncio.to_thread(self._fingerprint, exe) if exe else ""
                return LlamaCppBuildAnswer(name=offer.name, version=offer.version, digest=digest,
                                           previous=self.preferred.previous, smoke="not run: already preferred",
                                           already=True)
            created = False
        else:
            os.rename(built, target)  # beside the build in use; never over it
            created = True
        exe = read_build(target)
        if exe is None:  # cannot be: verify() read the same folder
            raise BuildRefused(f"build refused: {target} is not a usable build")
        try:
            smoke = await self._smoke(exe, offer.smoke_model)
        except SmokeFailed:
            if created:
                await asyncio.to_thread(shutil.rmtree, target, True)
            _LOGGER.warning("llama.cpp build %s failed its smoke test: removed, still running %s", offer.name,
                            current or "the build found before")
            raise
        previous = current or _describe(self.catalog)
        self.preferred.switch(offer.name, previous)
        digest = await asyncio.to_thread(self._fingerprint, exe)
        self.driver.checks.record(digest, "ok", str(exe.path), "smoke test of a rolled-out build")
        _LOGGER.warning("llama.cpp build %s installed and preferred (replacing %s)", offer.name, previous)
        return LlamaCppBuildAnswer(name=offer.name, version=offer.version, digest=digest, previous=previous,
                                   smoke=smoke)

    def _fingerprint(self, exe: RuntimeExecutable) -> str:
        return self.driver.checks.fingerprint(exe.path, exe.library_dir)

    async def _smoke(self, exe: RuntimeExecutable, model: str) -> str:
        """Load ``model`` with the build ``exe`` and ask for one token; its last lines on failure."""
        driver = LlamaCppDriver(self.paths, RuntimeCatalog(llama_server=exe.path, environ={}, runtime_roots=[]),
                                self.driver.checks)
        spec = LaunchSpec(instance_id=SMOKE_ID, model_path=model, served_name=SMOKE_ID,
                          settings=LlamaCppSettings(ctx_size=512, parallel=1), startup_timeout_s=self.smoke_timeout_s)
        port = await asyncio.to_thread(find_free_port, self.taken_ports(), self.first_port)
        try:
            run = driver.launch(spec, port, LogRing())
        except (SpecRejected, NoRuntime, RuntimeUnusable, OSError) as exc:
            raise SmokeFailed(f"smoke test failed: the new build did not start: {exc}; it was removed and the "
                              "previous build kept") from None
        try:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
                try:
                    await run.wait_ready(session, self.smoke_timeout_s, serves)
                    why = await one_token(run, session, self.smoke_timeout_s)
                except StartFailed as exc:
                    raise SmokeFailed(f"smoke test failed: {exc}; the new build was removed and the previous one "
                                      "kept", details={"last_lines": exc.lines}) from None
                if why is not None or run.process.poll():
                    code = await run.wait_exit() if run.process.poll() else None
                    reason = run.exit_message(code) if code is not None else why
                    raise SmokeFailed(f"smoke test failed: no token from the new build ({reason}); it was removed "
                                      "and the previous one kept", details={"last_lines": run.last_lines()})
        finally:
            if not run.process.poll():
                await run.terminate(5.0)
        return f"one token from {Path(model).name}"


def _same_manifest(a: Path, b: Path) -> bool:
    try:
        return bool((a / RUNTIME_MANIFEST).read_bytes() == (b / RUNTIME_MANIFEST).read_bytes())
    except OSError:
        return False


def _describe(catalog: RuntimeCatalog) -> str | None:
    exe = catalog.llama_server()
    return str(exe.path) if exe is not None else None


BuildsOf = Callable[[web.Request], LlamaCppBuilds]


def routes(prefix: str, builds_of: BuildsOf) -> list[web.RouteDef]:
    """``POST {prefix}/runtimes/llamacpp``: the body is the build's archive, the query a ``LlamaCppBuildOffer``."""

    async def install(request: web.Request) -> web.Response:
        builds = builds_of(request)
        offer = offer_from_query(request, LlamaCppBuildOffer,
                                 lambda why: BuildRefused(f"not a valid build offer: {why}", code="invalid_build_offer"))
        answer = await builds.receive(offer, body_chunks(request))
        return web.json_response(answer.model_dump(mode="json"))

    return [web.post(f"{prefix}{RUNTIME_BUILD_PATH}", install)]
