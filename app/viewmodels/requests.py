"""The Requests page: what happened to my request? The daemon's access log of /v1, live, with filters
and one request in full.

Filters are the API's (``DaemonApi.requests``): a model (asked for or answering as a fallback), an
API key, a status class (2xx, 4xx, 5xx) and slower than N ms. The list is read again every
``refresh_s`` while the page is in view (``watch``): every /v1 request writes a row and the daemon
announces none of them, so a modest timer, only while someone looks, is the honest way to stay live.
``open`` shows one request by its X-Request-Id (a row picked in the list, or an id pasted from an
error), as the daemon answers it now; ``detail_error`` says when there is none. Key names come from
``list_keys``, read again when the daemon announces ``keys.changed``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from app.viewmodels.filtered_read import read_filtered
from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from core.tasks import cancel_and_wait
from daemon.api.access_log import STATUS_CLASSES
from daemon.api.client import DaemonError
from daemon.api.models import Event, RequestRecord
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

PAGE_SIZE = 200
REFRESH_S = 5.0
STATUSES = ("", *STATUS_CLASSES)  # "" is any


@dataclass(frozen=True)
class RequestsFilters:
    model: str = ""           # a model id; "" is any
    key_id: str = ""          # an API key id; "" is any
    status: str = ""          # one of STATUSES
    slower_than_ms: int = 0   # 0 is any


@dataclass(frozen=True)
class RequestsState:
    rows: tuple[RequestRecord, ...] = ()
    filters: RequestsFilters = RequestsFilters()
    selected: str | None = None               # the request id shown in full
    detail: RequestRecord | None = None       # that request, as the daemon answered it
    detail_error: str | None = None           # why there is none ("no /v1 request with id ...")
    key_names: tuple[tuple[str, str], ...] = ()  # (id, name) of every API key
    loading: bool = False
    error: str | None = None

    def key_name(self, key_id: str | None) -> str:
        """A key by its name; a revoked key's id as it is; '' for none."""
        if key_id is None:
            return ""
        return next((name for kid, name in self.key_names if kid == key_id), key_id)


class RequestsViewModel:
    def __init__(self, fleet: FleetViewModel, refresh_s: float = REFRESH_S) -> None:
        self.client: DaemonApi = fleet.client
        self.refresh_s = refresh_s
        self.state: Observable[RequestsState] = Observable(RequestsState())
        self._watching: asyncio.Task[None] | None = None
        self._connected = False
        fleet.snapshot.subscribe(self._on_fleet, now=True)
        fleet.events.subscribe(self._on_event)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        came_back = snapshot.connected and snapshot.loaded and not self._connected
        self._connected = snapshot.connected and snapshot.loaded
        if came_back and self._watching is not None:
            asyncio.ensure_future(self.read_keys())

    def _on_event(self, event: Event) -> None:
        if event.type == "keys.changed":
            asyncio.ensure_future(self.read_keys())

    # --- live while in view -----------------------------------------------------------------------
    def watch(self, on: bool) -> None:
        """Read the log now and every ``refresh_s`` while ``on`` (the page is in view)."""
        if on and self._watching is None:
            self._watching = asyncio.ensure_future(self._watch())
        elif not on and self._watching is not None:
            self._watching.cancel()
            self._watching = None

    async def _watch(self) -> None:
        await self.read_keys()
        while True:
            await self.refresh()
            await asyncio.sleep(self.refresh_s)

    def close(self) -> None:
        self.watch(False)

    # --- reads ------------------------------------------------------------------------------------
    async def refresh(self) -> None:
        read = await read_filtered(self.state, self._read)
        if read is None:
            return
        now, rows = read
        self.state.set(replace(now, rows=tuple(rows), loading=False, error=None))

    async def _read(self, s: RequestsState) -> list[RequestRecord]:
        f = s.filters
        return await self.client.requests(PAGE_SIZE, model=f.model or None, key_id=f.key_id or None,
                                          status=f.status or None,
                                          slower_than_ms=float(f.slower_than_ms) if f.slower_than_ms else None)

    async def read_keys(self) -> None:
        try:
            keys = await self.client.list_keys()
        except DaemonError as exc:
            _LOGGER.info("requests: could not read the API keys: %s", exc.message)
            return
        self.state.set(replace(self.state.value, key_names=tuple((k.id, k.name) for k in keys)))

    async def set_filters(self, filters: RequestsFilters) -> None:
        if filters.status not in STATUSES or filters.slower_than_ms < 0:
            raise ValueError(f"unknown filter: status={filters.status!r}, slower_than_ms={filters.slower_than_ms}")
        if filters != self.state.value.filters:
            self.state.set(replace(self.state.value, filters=filters))
            await self.refresh()

    async def open(self, request_id: str) -> None:
        """Show one request in full: the row at once when the list has it, then as the daemon answers."""
        request_id = request_id.strip()
        if not request_id:
            return
        known = next((r for r in self.state.value.rows if r.id == request_id), None)
        self.state.set(replace(self.state.value, selected=request_id, detail=known, detail_error=None))
        try:
            record = await self.client.request(request_id)
        except DaemonError as exc:
            if self.state.value.selected == request_id:
                missing = exc.code == "request_not_found"
                self.state.set(replace(self.state.value, detail=None if missing else known,
                                       detail_error=exc.message))
            return
        if self.state.value.selected == request_id:
            self.state.set(replace(self.state.value, detail=record, detail_error=None))

    def clear_selection(self) -> None:
        self.state.set(replace(self.state.value, selected=None, detail=None, detail_error=None))

    async def stop(self) -> None:
        task, self._watching = self._watching, None
        await cancel_and_wait(task)
