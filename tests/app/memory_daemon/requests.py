"""The demo daemon's access log (``requests``, ``request``), mixed into ``memory_daemon.DemoDaemon``.

Empty at first (a test adds rows with ``add_request``). Filters are the
daemon's own (``RequestFilters``): a bad one is 422 ``invalid_filter`` here too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from daemon.api.access_log import RequestFilters
from daemon.api.client import DaemonError
from daemon.api.models import RequestRecord

_LOGGER = logging.getLogger(__name__)

class DemoRequests:
    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def access_log(self) -> list[RequestRecord]:
        """Oldest first, as the daemon writes them."""
        rows: list[RequestRecord] | None = self.__dict__.get("_demo_requests")
        if rows is None:
            rows = self.__dict__["_demo_requests"] = []
        return rows

    def add_request(self, record: RequestRecord) -> RequestRecord:
        """A /v1 request as if the daemon had just logged it (for a test)."""
        self.access_log.append(record)
        return record

    async def requests(self, limit: int = 100, *, model: str | None = None, key_id: str | None = None,
                       status: str | None = None, slower_than_ms: float | None = None) -> list[RequestRecord]:
        self._record("requests", limit, model, key_id, status, slower_than_ms)
        try:
            filters = RequestFilters.model_validate(
                {k: v for k, v in {"model": model, "key_id": key_id, "status": status,
                                   "slower_than_ms": slower_than_ms, "limit": limit}.items() if v is not None})
        except ValidationError as exc:
            raise DaemonError(422, "invalid_filter", "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())) from None
        found = [r for r in reversed(self.access_log) if filters.matches(r)]
        return found[:filters.limit]

    async def request(self, request_id: str) -> RequestRecord:
        self._record("request", request_id)
        found = next((r for r in reversed(self.access_log) if r.id == request_id), None)
        if found is None:
            raise DaemonError(404, "request_not_found", f"No /v1 request with id '{request_id[:128]}' in the "
                              "access log: it keeps 30 days; check the id against the X-Request-Id header.")
        return found
