"""``mirbadllm ctl models search|files|catalog``: find a model on the Hugging Face hub from a terminal,
and the catalog's short names (``gemma3:1b``) that ``ctl models pull`` and ``mirbadllm run`` accept.

    mirbadllm ctl models search QUERY [--format gguf|mlx|safetensors] [--limit N]
    mirbadllm ctl models files REPO                    # its GGUF models by quant, with sizes
    mirbadllm ctl models catalog                       # the curated models, and whether each fits here

The daemon asks the hub (``/api/hub/*``); nothing here downloads or registers anything. A search
without hits, a repository without GGUF, a gated one or a hub that does not answer: a message and
exit status 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime
from typing import Any

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.hub import (
    HUB_FORMATS,
    MACHINE_CLASSES,
    CatalogEntry,
    resolve_short_name,
)
from daemon.api.models import ModelView

_LOGGER = logging.getLogger(__name__)

_FIT = {"fits": "fits", "tight": "tight", "too_big": "too big", "unknown": "?"}


def add_parsers(models: Any) -> None:
    search = models.add_parser("search", help="search the Hugging Face hub: most downloaded first")
    search.add_argument("query", nargs="+", help="words of the repository's name, e.g. qwen3 8b")
    search.add_argument("--format", choices=HUB_FORMATS, default="gguf")
    search.add_argument("--limit", type=int, default=20)
    files = models.add_parser("files", help="a hub repository's GGUF models by quant, with their sizes")
    files.add_argument("repo", metavar="REPO", help="owner/name, e.g. bartowski/Qwen3-8B-GGUF")
    models.add_parser("catalog", help="the curated models (short names for pull and run), and what fits here")


def size_text(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def count_text(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


def _day(when: datetime | None) -> str:
    return when.strftime("%Y-%m-%d") if when else "-"


async def catalog_entry(client: DaemonClient, name: str) -> CatalogEntry:
    """The catalog's entry of a short name, else the error that lists how to find one."""
    entry = resolve_short_name((await client.hub_catalog()).entries, name)
    if entry is None:
        raise DaemonError(404, "not_in_catalog", f"'{name}' is not in the catalog: `mirbadllm ctl models catalog` "
                          "lists the short names; or pull REPO[:QUANT] (`mirbadllm ctl models search WORDS`)")
    return entry


def registered_as(views: list[ModelView], entry: CatalogEntry, node: str | None = None) -> ModelView | None:
    """A model already registered (on ``node``, else anywhere) for a catalog entry: by its short name,
    or by its repository's file."""
    for view in views:
        d = view.definition
        if node is not None and d.node != node:
            continue
        if d.served_name == entry.name or d.id == entry.model_id:
            return view
        if d.sources is not None and d.sources.hf_repo == entry.repo and d.model_path.endswith(entry.file):
            return view
    return None


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "search":
        return await _search(client, " ".join(args.query), args.format, args.limit)
    if args.action == "files":
        return await _files(client, args.repo)
    return await _catalog(client)


async def _search(client: DaemonClient, query: str, fmt: Any, limit: int) -> int:
    found = await client.hub_search(query, fmt, limit)
    if not found.repos:
        print(f"error: {found.message}", file=sys.stderr)
        return 1
    width = max(len(r.id) for r in found.repos)
    print(f"{'REPOSITORY':<{width}}  {'DOWNLOADS':>9}  {'LIKES':>6}  UPDATED")
    for repo in found.repos:
        print(f"{repo.id:<{width}}  {count_text(repo.downloads):>9}  {count_text(repo.likes):>6}  {_day(repo.updated)}"
              + ("  gated" if repo.gated else ""))
    if fmt == "gguf":
        print(f"\nits quants and sizes: `mirbadllm ctl models files {found.repos[0].id}`", file=sys.stderr)
    return 0


async def _files(client: DaemonClient, repo: str) -> int:
    files = await client.hub_repo_files(repo)
    print(f"{files.repo}  {count_text(files.downloads)} downloads  {count_text(files.likes)} likes  "
          f"updated {_day(files.updated)}")
    width = max(len(q.quant) for q in files.quants)
    for quant in files.quants:
        parts = f"  ({len(quant.files)} parts)" if len(quant.files) > 1 else ""
        print(f"  {quant.quant:<{width}}  {size_text(quant.size):>9}  {quant.file}{parts}")
    for projector in files.projectors:
        print(f"  vision projector {projector.path} ({size_text(projector.size)}), downloaded with the model")
    if files.note:
        print(f"note: {files.note}", file=sys.stderr)
    print(f"\ndownload one: `mirbadllm ctl models pull {files.repo}:{files.quants[0].quant}`", file=sys.stderr)
    return 0


async def _catalog(client: DaemonClient) -> int:
    view = await client.hub_catalog()
    if view.memory:
        where = "its GPUs" if view.memory_kind == "gpu" else "its memory"
        print(f"this machine: {size_text(view.memory)} in {where}")
    width = max(len(e.name) for e in view.entries)
    for key, title, _bound in MACHINE_CLASSES:
        members = [e for e in view.entries if e.machine == key]
        if members:
            print(f"\n{title}:")
        for e in members:
            print(f"  {e.name:<{width}}  {size_text(e.size):>9}  {_FIT[e.fit]:<7}  {e.why}")
    print("\npull one: `mirbadllm ctl models pull NAME`; chat: `mirbadllm run NAME`", file=sys.stderr)
    return 0
