"""The Audit page: the daemon's audit log, newest first, with filters and the change of one entry.

Filters are the API's (``DaemonApi.audit``): an action or group (``model``), who (app, ctl, admin
token, system), a subject and how far back. ``load_older`` fetches the next page. The selected
entry's ``diff`` is one row per field: for an edit the fields that changed, old and new; for a
created or removed object its fields on the side it exists. The log is read again when the daemon
announces a change (an action writes an entry), at most one read at a time. ``set_retention``
changes how many days the daemon keeps entries (the ``audit_retention_days`` setting).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from typing import Any

from app.viewmodels.filtered_read import read_filtered
from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.audit import (
    ACTOR_ADMIN_TOKEN,
    ACTOR_APP,
    ACTOR_CTL,
    ACTOR_SYSTEM,
    AuditEntry,
    changes,
)
from daemon.api.client import DaemonError
from daemon.api.models import DaemonSettings, Event
from daemon.api.protocol import DaemonApi

PAGE_SIZE = 200
ACTORS = ("", ACTOR_APP, ACTOR_CTL, ACTOR_ADMIN_TOKEN, ACTOR_SYSTEM)  # "" is anyone
SINCE_S = {"": None, "1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}  # "" is any time
# Events that come with an audit entry (or are quiet, frequent ones that never do: not listed).
_CHANGING = ("model.added", "model.updated", "model.removed", "keys.changed", "settings.changed", "node.paired",
             "node.removed", "model.evicted", "model.unloaded", "model.crashed", "model.stalled",
             "model.restarts_paused", "job.started", "job.finished", "transfer.state")


@dataclass(frozen=True)
class AuditFilters:
    action: str = ""
    actor: str = ""
    subject: str = ""
    since: str = ""  # a key of SINCE_S


@dataclass(frozen=True)
class DiffRow:
    field: str
    before: str
    after: str


@dataclass(frozen=True)
class AuditState:
    entries: tuple[AuditEntry, ...] = ()
    filters: AuditFilters = AuditFilters()
    selected: int | None = None   # an entry id
    more: int | None = None       # the next page's ``before``; None: nothing older
    loading: bool = False
    error: str | None = None
    retention_days: int | None = None  # the daemon's audit_retention_days, once read

    @property
    def selected_entry(self) -> AuditEntry | None:
        return next((e for e in self.entries if e.id == self.selected), None)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def diff(entry: AuditEntry | None) -> tuple[DiffRow, ...]:
    """One row per field of the entry's change (see the module docstring)."""
    if entry is None or (entry.before is None and entry.after is None):
        return ()
    return tuple(DiffRow(c.field, "" if c.added else _cell(c.old), "" if c.removed else _cell(c.new))
                 for c in changes(entry.before, entry.after))


class AuditViewModel:
    def __init__(self, fleet: FleetViewModel) -> None:
        self.client: DaemonApi = fleet.client
        self.state: Observable[AuditState] = Observable(AuditState())
        self._loaded = False
        self._reading: asyncio.Future[None] | None = None
        self._again = False
        fleet.snapshot.subscribe(self._on_fleet, now=True)
        fleet.events.subscribe(self._on_event)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        if snapshot.connected and snapshot.loaded and not self._loaded:
            self._loaded = True
            self.changed()
            asyncio.ensure_future(self.read_retention())
        elif not snapshot.connected:
            self._loaded = False

    def _on_event(self, event: Event) -> None:
        if event.type in _CHANGING:
            self.changed()
        if event.type == "settings.changed":
            asyncio.ensure_future(self.read_retention())

    def changed(self) -> None:
        """Read the log again soon: one read at a time, one more after it if asked meanwhile."""
        if self._reading is not None and not self._reading.done():
            self._again = True
            return
        self._reading = asyncio.ensure_future(self._read_until_settled())

    async def _read_until_settled(self) -> None:
        while True:
            self._again = False
            await self.refresh()
            if not self._again:
                return

    def _query(self, filters: AuditFilters) -> dict[str, Any]:
        span = SINCE_S.get(filters.since)
        return {"action": filters.action.strip() or None, "actor": filters.actor or None,
                "subject": filters.subject.strip() or None, "since": time.time() - span if span else None}

    async def refresh(self) -> None:
        read = await read_filtered(self.state, lambda s: self.client.audit(**self._query(s.filters), limit=PAGE_SIZE))
        if read is None:
            return
        now, page = read
        selected = now.selected if any(e.id == now.selected for e in page.entries) else None
        self.state.set(replace(now, entries=tuple(page.entries), more=page.next_before, selected=selected,
                               loading=False, error=None))

    async def read_retention(self) -> None:
        try:
            settings = await self.client.get_settings()
        except DaemonError as exc:
            self.state.set(replace(self.state.value, error=exc.message))
            return
        self.state.set(replace(self.state.value, retention_days=settings.audit_retention_days))

    async def set_retention(self, days: int) -> DaemonSettings:
        current = await self.client.get_settings()
        saved = await self.client.put_settings(current.model_copy(update={"audit_retention_days": days}))
        self.state.set(replace(self.state.value, retention_days=saved.audit_retention_days))
        return saved

    async def load_older(self) -> None:
        s = self.state.value
        if s.more is None:
            return
        try:
            page = await self.client.audit(**self._query(s.filters), limit=PAGE_SIZE, before=s.more)
        except DaemonError as exc:
            self.state.set(replace(self.state.value, error=exc.message))
            return
        now = self.state.value
        if now.filters == s.filters and now.more == s.more:
            self.state.set(replace(now, entries=now.entries + tuple(page.entries), more=page.next_before, error=None))

    async def set_filters(self, filters: AuditFilters) -> None:
        if filters.since not in SINCE_S or filters.actor not in ACTORS:
            raise ValueError(f"unknown filter: since={filters.since!r}, actor={filters.actor!r}")
        if filters != self.state.value.filters:
            self.state.set(replace(self.state.value, filters=filters, more=None))
            await self.refresh()

    def select(self, entry_id: int | None) -> None:
        self.state.set(replace(self.state.value, selected=entry_id))
