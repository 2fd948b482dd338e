"""Per-model admission on the router: as many requests run as the model has slots, a bounded
FIFO queue waits behind them (also while a model loads on demand), and the rest get 503.

A client that disconnects while queued is cancelled by aiohttp, and leaves the queue with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

_LOGGER = logging.getLogger(__name__)

DEFAULT_SLOTS = 4


class QueueFull(Exception):
    pass


class ModelGate:
    def __init__(self, slots: int, queue_limit: int) -> None:
        self.slots = slots
        self.queue_limit = queue_limit
        self.waiting = 0
        self.running = 0
        self._free = asyncio.Semaphore(slots)  # FIFO: waiters are woken in arrival order

    @asynccontextmanager
    async def queued(self) -> AsyncIterator[None]:
        """Hold a place in the queue (while the model loads, or before a slot frees)."""
        if self.waiting >= self.queue_limit and (self._free.locked() or self.waiting > 0):
            raise QueueFull
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1

    async def acquire_slot(self) -> None:
        await self._free.acquire()
        self.running += 1

    def release_slot(self) -> None:
        self.running -= 1
        self._free.release()


class Gates:
    """One gate per model, rebuilt when its slot count or queue limit changes."""

    def __init__(self) -> None:
        self._gates: dict[str, ModelGate] = {}

    def for_model(self, model_id: str, slots: int, queue_limit: int) -> ModelGate:
        gate = self._gates.get(model_id)
        if gate is None or (gate.slots, gate.queue_limit) != (slots, queue_limit):
            gate = ModelGate(slots, queue_limit)  # requests on the old gate finish on it
            self._gates[model_id] = gate
        return gate
