"""The transfers the admin API started on the nodes, followed until they finish.

``Transfers`` owns the daemon's view of each download or import (``Transfer``, with the daemon's own
id): it long-polls the node's agent while any of its transfers there is unfinished and turns every
change into an event (``transfer.state``, ``transfer.progress``). When a transfer is done, the models
it produced are registered (``model.added``, ``daemon.sources.registration``) unless the request said not to.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agent.api.client import AgentError
from agent.api.sources import FINISHED_TRANSFERS, TransferInfo, TransferState
from daemon.api.sources import Transfer
from daemon.events import EventBus
from daemon.history import History
from daemon.nodes.links import Links
from daemon.sources.registration import Registered

_LOGGER = logging.getLogger(__name__)

POLL_S = 20.0
Register = Callable[[Transfer, Any], Awaitable[Registered]]
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class Transfers:
    def __init__(self, links: Links, events: EventBus, history: History, register: Register, spawn: Spawn) -> None:
        self._links = links
        self._events = events
        self._history = history
        self._register = register
        self._spawn = spawn  # a background task that stops with the daemon
        self._transfers: dict[str, Transfer] = {}
        self._ids = itertools.count(1)
        self._watching: set[str] = set()
        self._queries: dict[str, Any] = {}  # what to register when a transfer is done
        self._registers: dict[str, Register] = {}  # a transfer's own register (a restore's re-fetch)

    def all(self) -> list[Transfer]:
        return sorted(self._transfers.values(), key=lambda t: t.created_at)

    def get(self, transfer_id: str) -> Transfer | None:
        return self._transfers.get(transfer_id)

    async def track(self, node: str, info: TransferInfo, query: Any, register: Register | None = None) -> Transfer:
        """Follow ``info`` on ``node``; when done, ``register`` (default: the models found are added) is
        called with ``query`` if its ``register_models`` says so."""
        transfer_id = f"x{next(self._ids)}"
        transfer = Transfer(**{**info.model_dump(), "id": transfer_id}, node=node, agent_id=info.id)
        self._transfers[transfer_id] = transfer
        self._queries[transfer_id] = query
        if register is not None:
            self._registers[transfer_id] = register
        self._events.publish("transfer.state", None, **transfer.model_dump(mode="json"))
        await self._history.audit("admin", f"transfer.{info.kind}", transfer_id, info.label)
        if node not in self._watching:
            self._watching.add(node)
            self._spawn(self._watch(node))  # cancelled with the daemon's other tasks
        return transfer

    async def own(self, node: str, info: TransferInfo) -> Transfer:
        """A transfer the daemon runs itself (a mirror push to ``node``, ``daemon.sources.mirror``): listed
        and evented like the others and moved on by ``update``, never followed on an agent (no ``agent_id``)."""
        transfer = Transfer(**{**info.model_dump(), "id": f"x{next(self._ids)}"}, node=node, agent_id="")
        self._transfers[transfer.id] = transfer
        self._events.publish("transfer.state", None, **transfer.model_dump(mode="json"))
        await self._history.audit("admin", f"transfer.{info.kind}", transfer.id, info.label)
        return transfer

    async def _watch(self, node: str) -> None:
        """Long-poll the node's transfers while any of ours there is unfinished."""
        version: int | None = None
        backoff = 0.5
        try:
            while any(t.node == node and t.agent_id and t.state not in FINISHED_TRANSFERS
                      for t in self._transfers.values()):
                link = self._links.get(node)
                try:
                    if link is None:
                        raise AgentError(0, "node_unknown", f"node '{node}' is gone")
                    page = await link.client.transfers(since=-1 if version is None else version, timeout=POLL_S)
                    backoff = 0.5
                except AgentError as exc:
                    _LOGGER.debug("following transfers on %s: %s", node, exc.message)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                version = page.version
                seen = {t.id: t for t in page.transfers}
                for transfer in list(self._transfers.values()):
                    if transfer.node != node or not transfer.agent_id or transfer.state in FINISHED_TRANSFERS:
                        continue
                    info = seen.get(transfer.agent_id)
                    if info is None:  # the agent restarted and forgot it
                        info = TransferInfo(**{**transfer.model_dump(), "id": transfer.agent_id,
                                               "state": TransferState.FAILED,
                                               "error": "the node lost this transfer (its agent restarted)"})
                    await self.update(transfer.id, info)
        finally:
            self._watching.discard(node)

    async def update(self, transfer_id: str, info: TransferInfo) -> None:
        old = self._transfers[transfer_id]
        new = old.model_copy(update={k: v for k, v in info.model_dump().items() if k != "id"})
        new.result = list(info.result)
        if new.model_dump() == old.model_dump():
            return
        self._transfers[transfer_id] = new
        if new.state == TransferState.DONE and old.state != TransferState.DONE:
            query = self._queries.pop(transfer_id, None)
            register = self._registers.pop(transfer_id, self._register)
            if query is not None and query.register_models:
                done = await register(new, query)
                new.registered, new.register_error, new.existing = done.ids, done.error, done.existing
        if new.state in FINISHED_TRANSFERS:
            self._registers.pop(transfer_id, None)
        if new.state != old.state:
            self._events.publish("transfer.state", None, **new.model_dump(mode="json"))
        else:
            self._events.publish("transfer.progress", None, id=new.id, node=new.node, state=new.state.value,
                                  stage=new.stage, bytes_done=new.bytes_done, bytes_total=new.bytes_total)
