"""The curated catalog shipped with the product (``catalog.json`` beside this module), read once, and
whether each entry fits this machine. It lives with the contracts because two read it: the daemon
(``GET /api/hub/catalog``) and the app's in-memory demo daemon, which sees only ``daemon.api``.

The fit is a first answer for a person browsing, not admission (the agent judges a start with the
file's header, ``/api/fit``): a model needs about its file size and a fifth more (the context's KV
cache and buffers, at a modest context), plus half a GiB. Against the local node's latest figures:
with discrete GPUs, it *fits* in 90 % of their memory together; it is *tight* when it runs only
partly on the GPUs (the rest in system memory, slower); without (a CPU, Apple's unified memory),
it fits in 75 % of the system memory, is tight up to 90 %; else *too big*. No figures yet: unknown.
"""

from __future__ import annotations

import json
import logging
from functools import cache
from pathlib import Path

from agent.api.models import GpuInfo
from daemon.api.hub import CatalogEntry, CatalogFitState, CatalogItem, CatalogView
from daemon.api.models import LOCAL_NODE, HostSnapshot

_LOGGER = logging.getLogger(__name__)

CATALOG_FILE = Path(__file__).with_name("catalog.json")
GB = 1_000_000_000
GiB = 1 << 30


@cache
def catalog_entries(path: Path = CATALOG_FILE) -> tuple[CatalogEntry, ...]:
    """The catalog's entries, read and checked once (a bad file fails loudly: it ships with the product)."""
    document = json.loads(path.read_text(encoding="utf-8"))
    return tuple(CatalogEntry.model_validate(e) for e in document["entries"])


def needed_bytes(size: int) -> int:
    """About what a model of ``size`` bytes takes to run at a modest context."""
    return int(size * 1.2) + GiB // 2


def _gb(value: int) -> str:
    return f"{value / GB:.0f} GB" if value >= 10 * GB else f"{value / GB:.1f} GB"


def judge(size: int, gpu_memory: int, system_memory: int) -> tuple[CatalogFitState, str]:
    """Whether a model of ``size`` bytes fits a machine with these memories (0: none), and why."""
    need = needed_bytes(size)
    if gpu_memory:
        if need <= gpu_memory * 0.9:
            return "fits", f"needs about {_gb(need)} of the GPU's {_gb(gpu_memory)}"
        if need <= gpu_memory + system_memory * 0.7:
            return "tight", (f"needs about {_gb(need)}, more than the GPU's {_gb(gpu_memory)}: it runs partly "
                             "on the CPU, slower")
        return "too_big", f"needs about {_gb(need)}; this machine has {_gb(gpu_memory + system_memory)} in all"
    if not system_memory:
        return "unknown", "this machine's memory is not known yet (its figures come in a few seconds after start)"
    if need <= system_memory * 0.75:
        return "fits", f"needs about {_gb(need)} of {_gb(system_memory)} memory"
    if need <= system_memory * 0.9:
        return "tight", f"needs about {_gb(need)} of {_gb(system_memory)} memory: close other programs"
    return "too_big", f"needs about {_gb(need)}; this machine has {_gb(system_memory)}"


def _discrete(gpus: list[GpuInfo]) -> int:
    return sum(g.memory_total for g in gpus if not g.unified_memory and g.memory_total > 0)


def catalog_view(hosts: list[HostSnapshot], entries: tuple[CatalogEntry, ...] | None = None) -> CatalogView:
    """The catalog with each entry judged against the local node's latest host figures."""
    local = next((h for h in hosts if h.node == LOCAL_NODE), None)
    gpu = _discrete(local.gpus) if local else 0
    system = (local.memory_total or 0) if local else 0
    items = []
    for entry in entries if entries is not None else catalog_entries():
        fit, note = judge(entry.size, gpu, system)
        items.append(CatalogItem(**entry.model_dump(), fit=fit, fit_note=note))
    if gpu:
        return CatalogView(entries=items, memory=gpu, memory_kind="gpu")
    return CatalogView(entries=items, memory=system or None, memory_kind="system" if system else "unknown")
