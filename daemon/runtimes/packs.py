"""GPU runtime packs: the llama.cpp build with CUDA, fetched for a node with an NVIDIA GPU.

What users download carries the CPU and Vulkan backends; CUDA is a pack of its own per driver line
(cuBLAS alone is some 500 MB), built by the release workflow's ``cuda-pack`` job and listed in the
signed release feed as ``llamacpp-cuda13-linux-x86_64`` and the like (``PACK_PLATFORMS``).

When a node (this machine's own agent included) reports an NVIDIA GPU (NVML: its driver version)
while its portable llama.cpp build has no CUDA backend, and its backend choice is ``auto`` or
``cuda``, ``RuntimePacks`` reads the signed feed (the app update's checks: the signature over the
raw bytes before any is parsed; the feed must be this program's own version, since a pack is built
from the same pinned llama.cpp), downloads the pack for the node's system, machine and driver line
(CUDA 13 from driver 580, CUDA 12 from 525; 527 on Windows) with the size and SHA-256 the feed
lists, unpacks it, checks it as any build (``load_build``: every file against its manifest) and
installs it on that node through the agent's build API (``RuntimeUpgradeManager.install_on``:
pushed, checked again, smoke-tested, preferred). The node's next llama.cpp start then picks CUDA
and its first-sight check proves it. A pack fetched once serves every node of its platform.

One attempt per node and pack while the daemon runs; each step is an event ``runtime_pack`` and
the node's ``NodeView.runtime_pack`` line; a refusal names the check that failed. No feed URL
(``DaemonConfig.release_feed_url``): nothing is fetched, and a node that could use CUDA says so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tarfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from agent.api.backends import Backend
from agent.api.runtimes import profile
from core.releases.feed import PLATFORMS
from core.releases.fetch import UpdateError, download_artefact, fetch_signed_feed
from core.releases.signing import RELEASE_PUBLIC_KEYS
from core.tasks import every
from daemon.api.nodes import NodeView, PackState, PackStep
from daemon.errors import DaemonProblem
from daemon.runtimes.build import MANIFEST, BuildRefused, StagedRuntimeBuild, load_build

_LOGGER = logging.getLogger(__name__)

#: The packs the release workflow builds, as the feed names them.
PACK_PLATFORMS = tuple(p for p in PLATFORMS if p.startswith("llamacpp-cuda"))
#: The oldest NVIDIA driver each CUDA line runs on (NVIDIA's CUDA release notes), newest line first.
DRIVER_LINES: tuple[tuple[str, dict[str, int]], ...] = (
    ("13", {"linux": 580, "windows": 580}),
    ("12", {"linux": 525, "windows": 527}),
)

@dataclass(frozen=True)
class PackNeed:
    platform: str
    line: str
    driver: str


def cuda_line(driver_version: str, system: str) -> str | None:
    """The newest CUDA line an NVIDIA driver runs (``"580.95.05"`` -> ``"13"``), None when too old."""
    try:
        major = int(driver_version.split(".")[0])
    except ValueError:
        return None
    return next((line for line, oldest in DRIVER_LINES if major >= oldest.get(system, 1 << 30)), None)


def _machine(name: str) -> str:
    lowered = name.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}.get(lowered, lowered)


def pack_need(view: NodeView) -> PackNeed | None:
    """The pack ``view``'s node could use: an NVIDIA GPU and a portable build without CUDA, while
    the node's choice lets CUDA be picked. None otherwise (a build on PATH is left as it is)."""
    if view.backend_choice not in ("auto", "cuda"):
        return None
    offer = next((o for o in view.runtimes if profile(o.runtime).gpu_backends and o.available), None)
    if offer is None or not offer.backends or any(s.backend is Backend.CUDA for s in offer.backends):
        return None
    driver = next((g.driver_version for g in view.gpus if g.driver_version), None)
    if driver is None:
        return None
    system = view.os.lower()
    line = cuda_line(driver, system)
    if line is None:
        return None
    platform = f"llamacpp-cuda{line}-{system}-{_machine(view.arch)}"
    return PackNeed(platform, line, driver) if platform in PACK_PLATFORMS else None


Install = Callable[[StagedRuntimeBuild, str], Awaitable[None]]


class RuntimePacks:
    def __init__(self, feed_url: str, current_version: str, home: Path, nodes: Callable[[], list[NodeView]],
                 install: Install, publish: Callable[..., Any], *,
                 trusted_keys: Sequence[str] = RELEASE_PUBLIC_KEYS, interval_s: float = 30.0) -> None:
        self.feed_url = feed_url
        self.current_version = current_version
        self.folder = home / "runtime-packs"  # unpacked packs, llamacpp-<version>-<key>/ each
        self._release = home / "runtime-release"  # where load_build packs what is pushed
        self._nodes = nodes
        self._install = install
        self._publish = publish
        self.trusted_keys = tuple(trusted_keys)  # the release keys; tests hand in their own
        self.interval_s = interval_s
        self.states: dict[str, PackState] = {}  # node id -> its pack, once one was needed
        self._fetched: dict[str, Path] = {}  # platform -> its unpacked build, this run
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()

    def state(self, node_id: str) -> PackState | None:
        return self.states.get(node_id)

    def poke(self) -> None:
        """Look at the nodes now (a node came online, its choice changed)."""
        self._wake.set()

    async def run(self) -> None:
        """Serve every node that needs a pack, now and whenever ``poke``d or ``interval_s`` passed."""
        await every(lambda: self.interval_s, self.serve_nodes, "runtime packs: a round", wake=self._wake)

    async def serve_nodes(self) -> None:
        async with self._lock:
            for view in self._nodes():
                need = pack_need(view)
                if need is None or view.id in self.states and self.states[view.id].platform == need.platform:
                    continue
                await self._serve(view, need)

    def _set(self, node_id: str, need: PackNeed, state: PackStep, message: str) -> None:
        self.states[node_id] = PackState(platform=need.platform, state=state, message=message)
        self._publish("runtime_pack", node=node_id, platform=need.platform, state=state, message=message)
        log = _LOGGER.warning if state == "failed" else _LOGGER.info
        log("runtime pack %s for node %s: %s", need.platform, node_id, message)

    async def _serve(self, view: NodeView, need: PackNeed) -> None:
        what = f"the CUDA {need.line} runtime pack (NVIDIA driver {need.driver})"
        if not self.feed_url:
            self._set(view.id, need, "off", f"{what} would run this node's GPU on CUDA; no release feed is set "
                      "(release_feed_url), so it is not fetched")
            return
        self._set(view.id, need, "fetching", f"fetching {what}")
        try:
            folder = await self._pack(need)
            build = await asyncio.to_thread(load_build, folder, self._release)
            self._set(view.id, need, "installing", f"installing {build.name} ({what})")
            await self._install(build, view.id)
        except UpdateError as exc:
            self._set(view.id, need, "failed", f"{what} was not used: {exc.message}")
        except BuildRefused as exc:
            self._set(view.id, need, "failed", f"{what} was refused: {exc}")
        except DaemonProblem as exc:
            self._set(view.id, need, "failed", f"{what} was not installed: {exc.message}")
            if exc.status == 409:  # a rollout ran, or the node went away for a moment: the next round tries again
                del self.states[view.id]
        else:
            self._set(view.id, need, "installed", f"{build.name} installed ({what}); the next start computes on CUDA")

    async def _pack(self, need: PackNeed) -> Path:
        """The unpacked pack for ``need``: fetched once per run, verified against the signed feed."""
        if need.platform in self._fetched and (self._fetched[need.platform] / MANIFEST).is_file():
            return self._fetched[need.platform]
        feed_url = URL(self.feed_url)
        if feed_url.scheme not in ("http", "https"):
            raise UpdateError("feed", f"Feed check failed: {feed_url} is not an http(s) URL")
        async with aiohttp.ClientSession() as session:
            feed = await fetch_signed_feed(session, feed_url, self.trusted_keys)
            if feed.version != self.current_version:
                raise UpdateError("version", f"Version check failed: the feed is for MirbadLLM {feed.version}, this "
                                             f"is {self.current_version}, whose packs are built from another llama.cpp; "
                                             "update MirbadLLM first")
            artefact = feed.artefact_for(need.platform)
            if artefact is None:
                raise UpdateError("platform", f"Platform check failed: MirbadLLM {feed.version} has no "
                                              f"{need.platform} pack in the feed")
            url = feed_url.join(URL(artefact.url))
            if url.scheme not in ("http", "https"):
                raise UpdateError("feed", f"Feed check failed: artefact URL {artefact.url!r} is not http(s)")
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = self.folder / f".{need.platform}.tar.gz.partial"
            try:
                await download_artefact(session, url, artefact, partial)
                folder = await asyncio.to_thread(_unpack, partial, self.folder)
            finally:
                partial.unlink(missing_ok=True)
        self._fetched[need.platform] = folder
        return folder


def _unpack(archive: Path, root: Path) -> Path:
    """Unpack a pack (one ``llamacpp-*`` folder) beside the others, replacing an older copy of it;
    tar's ``data`` filter refuses links out of it, devices and absolute names."""
    scratch = root / ".unpacking"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BuildRefused(f"the pack is not a readable .tar.gz: {exc}") from None
        entries = list(scratch.iterdir())
        if len(entries) != 1 or not entries[0].is_dir() or not entries[0].name.startswith("llamacpp-"):
            raise BuildRefused("the pack does not hold one llama.cpp build folder (llamacpp-<version>-<key>/)")
        final = root / entries[0].name
        shutil.rmtree(final, ignore_errors=True)
        os.replace(entries[0], final)
        return final
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
