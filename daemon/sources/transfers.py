"""The transfers the admin API started on the nodes, followed until they finish.

``Transfers`` owns the daemon's view of each download or import (``Transfer``, with the daemon's own
id): it long-polls the node's agent while any of its transfers there is unfinished and turns every
change into an event (``transfer.state``, ``transfer.progress``). When a transfer is done, the models
it produced are registered (``model.added``, ``daemon.sources.registration``) unless the request said not to.
A paused one is not followed until it is resumed (``follow``); each running one's speed and ETA come
from a ``RateMeter``, and finished ones are kept in a ``TransferLog`` (``daemon.sources.transfer_log``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agent.api.client import AgentError
from agent.api.sources import (
    FINISHED_TRANSFERS,
    SETTLED_TRANSFERS,
    TransferInfo,
    TransferState,
)
from daemon.api.sources import Transfer
from daemon.events import EventBus
from daemon.history import History
from daemon.nodes.links import Links
from daemon.sources.registration import Registered
from daemon.sources.transfer_log import RateMeter, TransferLog

_LOGGER = logging.getLogger(__name__)

POLL_S = 20.0
Register = Callable[[Transfer, Any], Awaitable[Registered]]
Spawn = Callable[[Coroutine[Any, Any, None]], None]
Again = Callable[[], Awaitable[TransferInfo]]  # sends a transfer's request to its node once more


class Transfers:
    def __init__(self, links: Links, events: EventBus, history: History, register: Register, spawn: Spawn,
                 log: TransferLog | None = None) -> None:
        self._links = links
        self._events = events
        self._history = history
        self._register = register
        self._spawn = spawn  # a background task that stops with the daemon
        self._log = log
        kept = log.load() if log is not None else []  # a small file, read once as the daemon is built
        self._transfers: dict[str, Transfer] = {t.id: t for t in kept}
        self._ids = itertools.count(1 + max((int(t.id[1:]) for t in kept if t.id[1:].isdigit()), default=0))
        self._watching: set[str] = set()
        self._queries: dict[str, Any] = {}  # what to register when a transfer is done
        self._registers: dict[str, Register] = {}  # a transfer's own register (a restore's re-fetch)
        self._agains: dict[str, Again] = {}  # how to start it anew when its node forgot it
        self._meters: dict[str, RateMeter] = {}

    def all(self) -> list[Transfer]:
        return sorted(self._transfers.values(), key=lambda t: t.created_at)

    def get(self, transfer_id: str) -> Transfer | None:
        return self._transfers.get(transfer_id)

    async def track(self, node: str, info: TransferInfo, query: Any, register: Register | None = None,
                    again: Again | None = None) -> Transfer:
        """Follow ``info`` on ``node``; when done, ``register`` (default: the models found are added) is
        called with ``query`` if its ``register_models`` says so. ``again`` starts it anew for a retry."""
        transfer_id = f"x{next(self._ids)}"
        transfer = Transfer(**{**info.model_dump(), "id": transfer_id}, node=node, agent_id=info.id)
        self._transfers[transfer_id] = transfer
        self._queries[transfer_id] = query
        if register is not None:
            self._registers[transfer_id] = register
        if again is not None:
            self._agains[transfer_id] = again
        self._events.publish("transfer.state", None, **transfer.model_dump(mode="json"))
        await self._history.audit("admin", f"transfer.{info.kind}", transfer_id, info.label)
        self._ensure_watch(node)
        return transfer

    def _ensure_watch(self, node: str) -> None:
        if node not in self._watching:
            self._watching.add(node)
            self._spawn(self._watch(node))  # cancelled with the daemon's other tasks

    async def start_again(self, transfer_id: str) -> TransferInfo | None:
        """The transfer's request sent to its node anew (None: the daemon no longer has it)."""
        again = self._agains.get(transfer_id)
        return None if again is None else await again()

    async def follow(self, transfer_id: str, info: TransferInfo) -> None:
        """The transfer runs again on its node as ``info`` (a resume or a retry): follow it to its end."""
        old = self._transfers[transfer_id]
        self._transfers[transfer_id] = old.model_copy(update={"agent_id": info.id, "error": None,
                                                              "finished_at": None})
        self._meters.pop(transfer_id, None)
        await self.update(transfer_id, info)
        self._ensure_watch(old.node)

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
            while any(t.node == node and t.agent_id and t.state not in SETTLED_TRANSFERS
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
                    if transfer.node != node or not transfer.agent_id or transfer.state in SETTLED_TRANSFERS:
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
        new = old.model_copy(update={k: v for k, v in info.model_dump().items() if k not in ("id", "created_at")})
        new.result = list(info.result)
        self._measure(new)
        if new.model_dump() == old.model_dump():
            return
        self._transfers[transfer_id] = new
        if new.state == TransferState.DONE and old.state != TransferState.DONE:
            query = self._queries.pop(transfer_id, None)
            register = self._registers.pop(transfer_id, self._register)
            if query is not None and query.register_models:
                done = await register(new, query)
                new.registered, new.register_error, new.existing = done.ids, done.error, done.existing
        if new.state in (TransferState.DONE, TransferState.CANCELLED):
            self._registers.pop(transfer_id, None)  # a failed one keeps its register for a retry
        if new.state != old.state:
            self._events.publish("transfer.state", None, **new.model_dump(mode="json"))
            if new.state in FINISHED_TRANSFERS:
                await self._keep_finished()
        else:
            self._events.publish("transfer.progress", None, id=new.id, node=new.node, state=new.state.value,
                                  stage=new.stage, bytes_done=new.bytes_done, bytes_total=new.bytes_total,
                                  speed_bps=new.speed_bps, eta_s=new.eta_s)

    def _measure(self, transfer: Transfer) -> None:
        """Speed and ETA of a running transfer; none once it stops."""
        if transfer.state != TransferState.RUNNING:
            self._meters.pop(transfer.id, None)
            transfer.speed_bps = transfer.eta_s = None
            return
        meter = self._meters.setdefault(transfer.id, RateMeter())
        transfer.speed_bps = meter.sample(transfer.bytes_done)
        transfer.eta_s = RateMeter.eta(transfer.speed_bps, transfer.bytes_done, transfer.bytes_total)

    async def _keep_finished(self) -> None:
        if self._log is None:
            return
        finished = sorted((t for t in self._transfers.values() if t.state in FINISHED_TRANSFERS),
                          key=lambda t: t.finished_at or t.created_at)
        for old in finished[: max(0, len(finished) - self._log.keep)]:  # the list stays bounded too
            self._transfers.pop(old.id, None)
            self._agains.pop(old.id, None)
        try:
            await asyncio.to_thread(self._log.save, finished[-self._log.keep:])
        except OSError as exc:
            _LOGGER.warning("could not keep the finished transfers in %s: %s", self._log.path, exc)
