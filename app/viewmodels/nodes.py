"""The Nodes page, Qt-free: paired nodes and agents waiting to be paired, one node selected.

``NodesViewModel`` refreshes from ``DaemonApi.list_nodes`` / ``discovered_nodes`` whenever the
event feed says a node changed (``node.*`` events) and on a slow timer for the gauges. The model
editor's node picker reads ``node_choices``: every node the daemon has, with its free memory. ``runtime_badges``
says what each node offers of the runtimes (llama.cpp, vLLM, MLX): available with the version, or
greyed with the node's reason; ``available_runtimes`` is what a model may be placed on there.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from app import format as fmt
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observable import Observable
from core.tasks import unless_running
from daemon.api.ca_rotation import CaRotationResult
from daemon.api.client import DaemonError
from daemon.api.contracts import RUNTIME_LABELS, RUNTIMES, GpuInfo
from daemon.api.models import Event
from daemon.api.nodes import DiscoveredNode, NodeState, NodeView, llamacpp_offer
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

LOCAL = "local"
NO_NODES = "No nodes yet: pair one on the Nodes page"  # the model editor's picker on a daemon without any
STATE_TEXT = {NodeState.ONLINE: "Online", NodeState.DEGRADED: "Degraded", NodeState.OFFLINE: "Offline",
              NodeState.UNKNOWN: "Checking…"}
BADGE = {NodeState.ONLINE: "ready", NodeState.DEGRADED: "starting", NodeState.OFFLINE: "failed",
         NodeState.UNKNOWN: "unknown"}


@dataclass(frozen=True)
class NodesState:
    loaded: bool = False
    nodes: tuple[NodeView, ...] = ()
    discovered: tuple[DiscoveredNode, ...] = ()
    selected_id: str | None = None
    error: str | None = None

    @property
    def selected(self) -> NodeView | None:
        return next((n for n in self.nodes if n.id == self.selected_id), None)

    def node(self, node_id: str) -> NodeView | None:
        return next((n for n in self.nodes if n.id == node_id), None)


@dataclass(frozen=True)
class RuntimeBadge:
    """One runtime on one node, as a badge: ``llama.cpp b4242``, or ``vLLM`` greyed with why not."""

    runtime: str
    text: str
    available: bool
    tooltip: str


def _short_version(version: str | None) -> str:
    """The badge keeps the version itself: ``b4242 (fa4e1234)`` -> ``b4242``; the tooltip has it all."""
    return (version or "").split(" (", 1)[0]


def runtime_badges(node: NodeView) -> tuple[RuntimeBadge, ...]:
    """Every runtime, in order, as the node reports it; empty while it has not reported."""
    if not node.runtimes:
        return ()
    by_runtime = {o.runtime: o for o in node.runtimes}
    badges = []
    for runtime in RUNTIMES:
        name, offer = RUNTIME_LABELS.get(runtime, runtime), by_runtime.get(runtime)
        if offer is None:
            badges.append(RuntimeBadge(runtime, name, False, f"{name}: this node's agent has no {name} driver"))
        elif offer.available:
            lines = [f"{name} {offer.version or '(version unknown)'}"]
            lines += [line for line in (offer.location, offer.digest and f"build {offer.digest[:12]}") if line]
            badges.append(RuntimeBadge(runtime, f"{name} {_short_version(offer.version)}".strip(), True,
                                       "\n".join(lines)))
        else:
            badges.append(RuntimeBadge(runtime, name, False, f"{name}: {offer.reason or 'unavailable'}"))
    return tuple(badges)


BACKEND_CHOICES = (("auto", "Automatic (best that works)"), ("cuda", "CUDA (NVIDIA)"), ("vulkan", "Vulkan (any GPU)"),
                   ("cpu", "CPU only"))


def backend_summary(node: NodeView) -> str:
    """One line for the Nodes page: what a model started now computes on, on which device, and why
    not a better backend; then each GPU backend of the build that is unavailable, with its reason."""
    if node.backend is None:
        return "Not reported yet" if not node.runtimes else "Unknown: this node's llama.cpp says nothing of its backends"
    offer = llamacpp_offer(node.runtimes)
    state = next((s for s in offer.backends if s.backend is node.backend), None) if offer else None
    devices = ", ".join(f"{d.name} · {d.description} · {fmt_mib(d.memory_total_mib)}" for d in state.devices) \
        if state is not None else ""
    line = f"Computes on {node.backend.label}" + (f" — {devices}" if devices else "")
    if state is not None and state.available and not state.verified and node.backend.is_gpu:
        line += " (checked at the first start)"
    if state is not None and state.driver:
        line += f" · driver {state.driver}"
    if node.backend_why:
        line += f"\nNot {node.backend_why}"
    if node.runtime_pack is not None and node.runtime_pack.state != "installed":
        line += f"\nRuntime pack: {node.runtime_pack.message}"
    return line


def fmt_mib(mib: int) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib} MiB"


def available_runtimes(node: NodeView | None) -> tuple[str, ...]:
    """The runtimes a model may be placed on at ``node``. A node that has not reported (offline, or
    not yet probed) may take llama.cpp, the default: the daemon refuses a start there anyway."""
    if node is None or not node.runtimes:
        return ("llamacpp",)
    return tuple(b.runtime for b in runtime_badges(node) if b.available)


def gpu_health(gpu: GpuInfo) -> str:
    """What a GPU reports of its health, where it reports it: ECC errors, XID errors, why its clocks
    are held down (not for being idle), Apple silicon's unified memory; "—" when it reports none."""
    parts: list[str] = []
    if gpu.unified_memory:
        limit = f", Metal limit {fmt.size(gpu.working_set_limit)}" if gpu.working_set_limit else ""
        parts.append(f"unified memory{limit}")
    if gpu.ecc is not None:
        corrected = gpu.ecc.volatile_corrected if gpu.ecc.volatile_corrected is not None else gpu.ecc.aggregate_corrected
        uncorrected = (gpu.ecc.volatile_uncorrected if gpu.ecc.volatile_uncorrected is not None
                       else gpu.ecc.aggregate_uncorrected)
        counts = [f"{n} {kind}" for n, kind in ((corrected, "corrected"), (uncorrected, "uncorrected")) if n is not None]
        if counts:
            parts.append("ECC " + ", ".join(counts))
    if gpu.xid_events:
        parts.append(f"XID ×{gpu.xid_events}" + (f" (last {gpu.last_xid})" if gpu.last_xid is not None else ""))
    held = [r.replace("_", " ") for r in gpu.throttle_reasons or () if r != "gpu_idle"]
    if held:
        parts.append("throttled: " + ", ".join(held))
    return " · ".join(parts) or "—"


def keys_warning(node: NodeView) -> str | None:
    """Why its agent's key is a plain 0600 file (no usable keychain on that machine), as its agent
    says; None when the key is in the keychain or the agent has not said."""
    return node.keys_at_rest.warning if node.keys_at_rest is not None else None


KEYS_ROW_NOTE = "Unencrypted key"  # the node list's short line (its tooltip and the panel say why)


def node_label(node: NodeView) -> str:
    """``gpu-box — 40.1 GiB free`` (plus the state when it is not online)."""
    name = "This machine" if node.local else node.name
    parts = [f"{name} — {fmt.size(node.memory_available)} free"]
    if node.gpus:
        free = sum(g.memory_total - g.memory_used for g in node.gpus)
        parts.append(f"GPU {fmt.size(free)} free")
    if node.state not in (NodeState.ONLINE, NodeState.UNKNOWN):
        parts.append(STATE_TEXT[node.state].lower())
    return " · ".join(parts)


def node_choices(nodes: tuple[NodeView, ...], current: str | None = None) -> list[tuple[str, str]]:
    """(node id, label) for the model editor's picker: the nodes the daemon has (empty: it has none);
    an unknown current placement stays listed, but never a "local" the daemon runs no agent for (it
    would refuse the model: ``unknown_node``)."""
    choices = [(n.id, node_label(n)) for n in nodes]
    if current and current != LOCAL and all(node_id != current for node_id, _label in choices):
        choices.append((current, f"{current[:12]}… — not paired"))
    return choices


class NodesViewModel:
    def __init__(self, client: DaemonApi, fleet: FleetViewModel, *, refresh_s: float = 5.0) -> None:
        self.client = client
        self.state: Observable[NodesState] = Observable(NodesState())
        self._refresh_s = refresh_s
        self._task: asyncio.Task[None] | None = None
        self._pending: asyncio.Future[None] | None = None
        fleet.events.subscribe(self._on_event)
        fleet.snapshot.subscribe(lambda snap: self._kick() if snap.connected and not self.state.value.loaded
                                 else None)

    # --- state in -------------------------------------------------------------------------------
    async def refresh(self) -> None:
        try:
            nodes = tuple(await self.client.list_nodes())
            discovered = tuple(await self.client.discovered_nodes())
        except DaemonError as exc:
            self.state.set(replace(self.state.value, error=exc.message))
            return
        current = self.state.value
        selected = current.selected_id if any(n.id == current.selected_id for n in nodes) else \
            (nodes[0].id if nodes else None)
        self.state.set(NodesState(loaded=True, nodes=nodes, discovered=discovered, selected_id=selected))

    def _on_event(self, event: Event) -> None:
        if event.type.startswith("node.") or event.type in ("model.added", "model.removed", "model.updated"):
            self._kick()

    def _kick(self) -> None:
        self._pending = unless_running(self._pending, self.refresh)

    def show(self) -> None:
        """Keep the gauges fresh while the page is on screen."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def hide(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self._refresh_s)

    # --- actions --------------------------------------------------------------------------------
    def select(self, node_id: str | None) -> None:
        self.state.set(replace(self.state.value, selected_id=node_id))

    async def remove(self, node_id: str) -> None:
        await self.client.remove_node(node_id)
        await self.refresh()

    async def rotate_ca(self) -> CaRotationResult:
        """A new CA on every online node, the old one retired (the daemon refuses it while pairing)."""
        result = await self.client.rotate_ca()
        await self.refresh()
        return result

    async def set_backend(self, node_id: str, choice: str) -> None:
        """What llama.cpp computes on there from the next start: auto, cuda, vulkan or cpu."""
        await self.client.set_node_backend(node_id, choice)
        await self.refresh()

    def name_of(self, node_id: str) -> str:
        node = self.state.value.node(node_id)
        if node is None:
            return "this machine" if node_id == LOCAL else f"{node_id[:12]}…"
        return "this machine" if node.local else node.name

    def close(self) -> None:
        self.hide()
        for task in (self._pending,):
            if task is not None:
                task.cancel()
