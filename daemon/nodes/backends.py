"""The per-node backend choice (``auto | cuda | vulkan | cpu``): kept here, sent with every launch.

The daemon owns the choice (``node_backends.json`` beside ``nodes.json``); the node owns what its
build can do (``RuntimeOffer.backends``). ``agent.api.backends.pick_backend`` joins the two, on the
node at each start and, through ``daemon.api.nodes.node_pick`` and ``refusal``, for the Nodes page,
``ctl nodes show`` and ``/api/nodes``. A choice
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
    BackendChoice,
)
from core.json_store import JsonStore, UnreadableStore

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
