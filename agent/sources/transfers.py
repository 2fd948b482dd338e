"""Transfers: downloads and imports running in the background, each with progress and a cancel.

Every change bumps a monotonic ``version`` and wakes the long-poll of
``GET /transfers?since=V`` (the daemon follows it and turns it into events). Progress is
published at most every ``PROGRESS_INTERVAL_S`` so a fast download does not flood the feed.
A transfer's work is a coroutine given a ``TransferHandle``; cancelling it cancels the coroutine,
whose own cleanup (deleting partial files) runs before the state says "cancelled". A download
(``pausable``) may be paused instead: the coroutine is cancelled with ``handle.pausing`` set, so
``agent.sources.fetch`` keeps its partial file, and the state says "paused"; ``resume`` runs the same
work again (a paused, failed or cancelled one), which goes on from the partial with a Range request.
A cancel of a paused one deletes the partials the work had named (``handle.partials``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.api.sources import (
    FINISHED_TRANSFERS,
    ImportedModel,
    TransferInfo,
    TransferKind,
    TransfersPage,
    TransferState,
)
from agent.problems import AgentProblem
from agent.sources.fetch import discard_partial

_LOGGER = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.25
KEEP_FINISHED = 50
RUNNING_AT_ONCE = 2


class UnknownTransfer(AgentProblem, status=404, code="transfer_not_found"):
    pass


class TransferRefused(AgentProblem, status=409, code="transfer_refused"):
    """A pause or resume this transfer's state or kind does not allow; the message says why."""


class TransferHandle:
    """What a running transfer may tell: its stage, its bytes, its files."""

    def __init__(self, info: TransferInfo, changed: Callable[[], None]) -> None:
        self.info = info
        self._changed = changed
        self._last = 0.0
        self.pausing = False  # set by a pause: the files being fetched keep their partials
        self.partials: list[Path] = []  # the targets whose partials a cancel of a paused transfer deletes

    def stage(self, stage: str, *, total: int | None = None, files: list[str] | None = None) -> None:
        self.info.stage = stage
        if total is not None:
            self.info.bytes_total = total
        if files is not None:
            self.info.files = files
        self._changed()

    def progress(self, done: int) -> None:
        self.info.bytes_done = done
        now = time.monotonic()
        if now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            self._changed()


Work = Callable[[TransferHandle], Awaitable[list[ImportedModel]]]


class TransferManager:
    def __init__(self, running_at_once: int = RUNNING_AT_ONCE) -> None:
        self._items: dict[str, TransferInfo] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._handles: dict[str, TransferHandle] = {}
        self._works: dict[str, Work] = {}  # a pausable transfer's work, run again by a resume
        self._version = 0
        self._changed = asyncio.Condition()
        self._polls_ended = False
        self._slots = asyncio.Semaphore(running_at_once)
        self._counter = itertools.count(1)

    @property
    def version(self) -> int:
        return self._version

    def _bump(self) -> None:
        self._version += 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def page(self) -> TransfersPage:
        return TransfersPage(version=self._version, transfers=[t.model_copy() for t in self._items.values()])

    async def wait_page(self, since: int, timeout: float) -> TransfersPage:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(lambda: self._version != since or self._polls_ended),
                                       timeout)
        return self.page()

    async def end_polls(self) -> None:
        """The agent is stopping: every long-poll answers now, and any later one at once."""
        async with self._changed:
            self._polls_ended = True
            self._changed.notify_all()

    def get(self, transfer_id: str) -> TransferInfo:
        try:
            return self._items[transfer_id].model_copy()
        except KeyError:
            raise UnknownTransfer(f"no transfer {transfer_id!r} on this agent") from None

    def start(self, kind: TransferKind, label: str, work: Work, *, pausable: bool = False) -> TransferInfo:
        transfer_id = f"t{next(self._counter)}-{uuid.uuid4().hex[:8]}"
        info = TransferInfo(id=transfer_id, kind=kind, label=label[:300], created_at=time.time(), pausable=pausable)
        self._items[transfer_id] = info
        if pausable:
            self._works[transfer_id] = work
        self._forget_old()
        self._launch(info, work)
        return info.model_copy()

    def _launch(self, info: TransferInfo, work: Work) -> None:
        handle = TransferHandle(info, self._bump)
        self._handles[info.id] = handle
        self._tasks[info.id] = asyncio.get_running_loop().create_task(
            self._run(info, work, handle), name=f"transfer {info.id}")
        self._bump()

    async def _run(self, info: TransferInfo, work: Work, handle: TransferHandle) -> None:
        try:
            async with self._slots:
                info.state = TransferState.RUNNING
                self._bump()
                info.result = await work(handle)
            info.state, info.stage = TransferState.DONE, "done"
        except asyncio.CancelledError:
            if handle.pausing:
                info.state, info.stage = TransferState.PAUSED, "paused"
            else:
                info.state, info.stage = TransferState.CANCELLED, "cancelled"
        except AgentProblem as exc:
            info.state, info.error = TransferState.FAILED, exc.message
        except Exception as exc:
            _LOGGER.exception("transfer %s failed", info.id)
            info.state, info.error = TransferState.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            info.finished_at = time.time()
            self._tasks.pop(info.id, None)
            self._bump()
            _LOGGER.info("transfer %s (%s) %s%s", info.id, info.label, info.state.value,
                         f": {info.error}" if info.error else "")

    async def cancel(self, transfer_id: str) -> TransferInfo:
        info = self.get(transfer_id)
        task = self._tasks.get(transfer_id)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif info.state is TransferState.PAUSED:  # its partials were kept for a resume that will not come
            live = self._items[transfer_id]
            for target in self._handles[transfer_id].partials:
                await asyncio.to_thread(discard_partial, target)
            live.state, live.stage, live.finished_at = TransferState.CANCELLED, "cancelled", time.time()
            self._bump()
        self._works.pop(transfer_id, None)
        return self.get(info.id)

    async def pause(self, transfer_id: str) -> TransferInfo:
        """Stop a download and keep what it fetched so far (``resume`` goes on from there)."""
        info = self.get(transfer_id)
        if not info.pausable:
            raise TransferRefused(f"a {info.kind} transfer cannot be paused; cancel it instead")
        task = self._tasks.get(transfer_id)
        if info.state is TransferState.PAUSED or task is None:
            if info.state is TransferState.PAUSED:
                return info
            raise TransferRefused(f"transfer {transfer_id} is {info.state.value}: there is nothing to pause")
        self._handles[transfer_id].pausing = True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return self.get(transfer_id)

    def resume(self, transfer_id: str) -> TransferInfo:
        """Run a paused, failed or cancelled download again; its partial files are where it goes on from."""
        info = self.get(transfer_id)
        work = self._works.get(transfer_id)
        if info.state is TransferState.DONE:
            raise TransferRefused(f"transfer {transfer_id} is done: there is nothing to resume")
        if info.state not in FINISHED_TRANSFERS | {TransferState.PAUSED}:
            return info  # running or queued already
        if work is None:
            raise TransferRefused(f"a {info.kind} transfer cannot be run again; start it anew")
        live = self._items[transfer_id]
        live.state, live.stage, live.error, live.finished_at = TransferState.QUEUED, "", None, None
        self._launch(live, work)
        return live.model_copy()

    def _forget_old(self) -> None:
        finished = [t for t in self._items.values() if t.state in FINISHED_TRANSFERS]
        for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._items[old.id]
            self._handles.pop(old.id, None)
            self._works.pop(old.id, None)

    async def close(self) -> None:
        for transfer_id in list(self._tasks):
            await self.cancel(transfer_id)
