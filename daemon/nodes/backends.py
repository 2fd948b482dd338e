"""The per-node backend choice (``auto | cuda | vulkan | cpu``): kept here, sent with every launch.

The daemon owns the choice (``node_backends.json`` beside ``nodes.json``); the node owns what its
build can do (``RuntimeOffer.backends``). ``agent.api.backends.pick_backend`` joins the two, on the
node at each start and here for the Nodes page, ``ctl nodes show`` and ``/api/nodes``. A choice
changes no running model: the next start on that node uses it (``Orchestrator.launch_spec``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import cast

from pydantic import BaseModel

from agent.api.backends import (
    CHOICES,
    Backend,
    BackendChoice,
    BackendState,
    Pick,
    pick_backend,
)
from agent.api.json_store import JsonStore, UnreadableStore
from agent.api.runtimes import RuntimeOffer

_LOGGER = logging.getLogger(__name__)

AUTO = "auto"


class _ChoicesFile(BaseModel):
    version: int = 1
    nodes: dict[str, str] = {}


class NodeBackends:
    """node id -> its backend choice; a node not listed is ``auto``."""

    def __init__(self, path: Path) -> None:
        self._store = JsonStore(path, _ChoicesFile)
        self._choices: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self.load()

    def load(self) -> None:
        try:
            data = self._store.read()
        except UnreadableStore as exc:
            _LOGGER.warning("ignoring unreadable %s (every node is auto): %s", self._store.path, exc)
            return
        self._choices = {k: v for k, v in (data.nodes if data else {}).items() if v in CHOICES}

    def choice(self, node_id: str) -> BackendChoice:
        return cast(BackendChoice, self._choices.get(node_id, AUTO))

    async def set(self, node_id: str, choice: str) -> BackendChoice:
        """Keep ``choice`` for ``node_id``; returns the one it replaces."""
        assert choice in CHOICES, choice
        async with self._lock:
            before = self.choice(node_id)
            if choice == AUTO:
                self._choices.pop(node_id, None)
            else:
                self._choices[node_id] = choice
            self._store.write(_ChoicesFile(nodes=dict(sorted(self._choices.items()))))
            return before

    async def forget(self, node_id: str) -> None:
        if node_id in self._choices:
            await self.set(node_id, AUTO)


def llamacpp_backends(offers: list[RuntimeOffer] | None) -> list[BackendState] | None:
    """The backends of the node's llama.cpp build as it last reported them; None when not known."""
    for offer in offers or []:
        if offer.runtime == "llamacpp" and offer.available:
            return list(offer.backends)
    return None


def refusal(node_id: str, choice: str, offers: list[RuntimeOffer] | None) -> tuple[int, str, str] | None:
    """Why ``choice`` cannot be kept for the node, as (status, code, message); None when it can.
    A GPU backend only where the node's build has it and it sees a device (422 naming what the node
    has); not while the node has not said (409). ``auto`` and ``cpu`` always can."""
    if choice not in ("cuda", "vulkan"):
        return None
    states = llamacpp_backends(offers)
    if states is None:
        return (409, "node_offline", (f"node '{node_id}' has not said which backends its llama.cpp build has (it is "
                "offline or not yet probed); choose auto or cpu, or try again once it answers"))
    state = next((s for s in states if s.backend.value == choice), None)
    if state is not None and state.available:
        return None
    have = "; ".join(
        f"{s.backend.label}: " + (", ".join(f"{d.name} {d.description} ({d.memory_total_mib} MiB)" for d in s.devices)
                                  or (s.reason or "no device"))
        for s in states if s.backend is not Backend.CPU) or "CPU only"
    why = state.reason if state is not None else f"its build has no {choice} backend"
    return (422, "backend_unavailable", (f"node '{node_id}' cannot compute on {choice}: {why}. The choices are "
            f"{', '.join(CHOICES)}; this node has {have}"))


def node_pick(choice: str, offers: list[RuntimeOffer] | None) -> Pick | None:
    """What a start on the node would compute on now; None while the node has not said."""
    states = llamacpp_backends(offers)
    if not states:
        return None
    return pick_backend(choice, states)
