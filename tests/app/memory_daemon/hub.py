"""The demo daemon's Discover (``hub_search``, ``hub_repo_files``, ``hub_catalog``), mixed into
``memory_daemon.DemoDaemon``.

A small hub in memory: a few well-known GGUF repositories with their quants (sizes as the real hub
lists them, rounded), one gated, one without GGUF; a search matches every word in a repository's
id, as the daemon's does through the hub. The catalog is the product's own (``daemon.api.catalog``),
judged against the demo's host. A test may set ``hub_repos`` and ``hub_down`` (the hub does not answer).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.api.catalog import catalog_view
from daemon.api.client import DaemonError
from daemon.api.hub import (
    CatalogView,
    HubFile,
    HubFormat,
    HubRepo,
    HubRepoFiles,
    HubSearchResult,
    QuantVariant,
)

if TYPE_CHECKING:
    from daemon.api.models import HostSnapshot

_LOGGER = logging.getLogger(__name__)

GB = 1_000_000_000


def _repo(repo_id: str, downloads: int, likes: int, quants: dict[str, float], *, gated: bool = False,
          projector: float | None = None, fmt: HubFormat = "gguf") -> tuple[HubRepo, HubRepoFiles, HubFormat]:
    name = repo_id.split("/")[1].removesuffix("-GGUF")
    variants = [QuantVariant(quant=q, file=f"{name}-{q}.gguf", files=[HubFile(path=f"{name}-{q}.gguf",
                                                                               size=int(gb * GB))],
                             size=int(gb * GB)) for q, gb in sorted(quants.items(), key=lambda kv: kv[1])]
    projectors = [HubFile(path=f"mmproj-{name}-f16.gguf", size=int(projector * GB))] if projector else []
    updated = datetime(2025, 5, 2, 9, 30, tzinfo=UTC)
    about = HubRepo(id=repo_id, downloads=downloads, likes=likes, updated=updated, gated=gated,
                    pipeline_tag="text-generation")
    note = f"{repo_id} is gated: accept its license on the hub, then give the node a token (HF_TOKEN)" \
        if gated else None
    return about, HubRepoFiles(repo=repo_id, downloads=downloads, likes=likes, updated=updated, gated=gated,
                               quants=variants, projectors=projectors, note=note), fmt


def demo_hub() -> list[tuple[HubRepo, HubRepoFiles, HubFormat]]:
    return [
        _repo("unsloth/Qwen3-8B-GGUF", 310_000, 420, {"Q4_K_M": 5.03, "Q5_K_M": 5.85, "Q8_0": 8.71, "BF16": 16.4}),
        _repo("bartowski/Qwen3-8B-GGUF", 95_000, 160, {"IQ3_XS": 3.63, "Q4_K_M": 5.03, "Q6_K": 6.73}),
        _repo("Qwen/Qwen3-4B-GGUF", 240_000, 380, {"Q4_K_M": 2.50, "Q8_0": 4.28}),
        _repo("ggml-org/gemma-3-4b-it-GGUF", 180_000, 210, {"Q4_K_M": 2.49, "Q8_0": 4.13}, projector=0.85),
        _repo("ggml-org/gemma-3-27b-it-GGUF", 120_000, 260, {"Q4_K_M": 16.5, "Q8_0": 28.7}, projector=0.86),
        _repo("meta-llama/Llama-3.2-3B-Instruct-GGUF", 60_000, 300, {"Q4_K_M": 2.02}, gated=True),
        _repo("bartowski/Llama-3.2-3B-Instruct-GGUF", 140_000, 190, {"Q4_K_M": 2.02, "Q6_K_L": 2.74,
                                                                     "Q8_0": 3.42}),
        _repo("Qwen/Qwen3-8B", 900_000, 800, {}, fmt="safetensors"),
    ]


class DemoHub:
    hosts: list[HostSnapshot]

    if TYPE_CHECKING:
        def _record(self, name: str, *args: Any) -> None: ...

    hub_repos: list[tuple[HubRepo, HubRepoFiles, HubFormat]] | None = None
    hub_down = False

    def _hub(self) -> list[tuple[HubRepo, HubRepoFiles, HubFormat]]:
        if self.hub_down:
            raise DaemonError(502, "hub_unreachable", "cannot reach the Hugging Face hub at https://huggingface.co: "
                                                      "check this machine's internet connection")
        if self.hub_repos is None:
            self.hub_repos = demo_hub()
        return self.hub_repos

    async def hub_search(self, query: str, fmt: HubFormat = "gguf", limit: int = 20) -> HubSearchResult:
        self._record("hub_search", query, fmt, limit)
        words = query.lower().split()
        if not words:
            raise DaemonError(400, "invalid_parameter", "q: give 1 to 200 characters to search for")
        found = sorted((about for about, _files, kind in self._hub()
                        if kind == fmt and all(w in about.id.lower() for w in words)),
                       key=lambda r: -r.downloads)[:limit]
        message = None if found else (f"no {fmt.upper()} repository on the hub matches '{query}': try fewer or "
                                      "other words")
        return HubSearchResult(query=query, format=fmt, repos=found, message=message)

    async def hub_repo_files(self, repo: str) -> HubRepoFiles:
        self._record("hub_repo_files", repo)
        for about, files, _kind in self._hub():
            if about.id == repo:
                if not files.quants:
                    raise DaemonError(404, "no_gguf_files", f"{repo} holds no GGUF model: search for a GGUF "
                                                            "version of it")
                return files
        raise DaemonError(404, "repo_not_found", f"no repository {repo} on the hub, or it is private")

    async def hub_catalog(self) -> CatalogView:
        self._record("hub_catalog")
        return catalog_view(self.hosts)
