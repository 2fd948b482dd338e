"""Contracts of the access-log queries: what happened to a /v1 request.

Every /v1 request leaves one row (``daemon.api.models.RequestRecord``) whose ``id`` is the
``X-Request-Id`` its answer carried. ``GET /api/requests/{id}`` is that row (404
``request_not_found`` once it is past retention or never was); ``GET /api/requests`` lists rows
newest first, narrowed by ``RequestFilters``: a model (the one asked for, or the fallback that
answered), an API key id, a status (``404``) or a class of them (``5xx``), slower than N ms, and
how many. The daemon reads the filters with ``validated`` (422 ``invalid_filter`` naming each bad
one); the app's demo daemon and ``mirbadllm ctl requests`` use the same model, so all agree.
"""

from __future__ import annotations

import logging
from http import HTTPStatus

from pydantic import BaseModel, ConfigDict, Field

from daemon.api.models import RequestRecord

_LOGGER = logging.getLogger(__name__)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
STATUS_PATTERN = r"^[1-5](?:[0-9]{2}|xx)$"
STATUS_CLASSES = ("2xx", "4xx", "5xx")


class RequestFilters(BaseModel):
    """The query of ``GET /api/requests``; an unknown parameter is refused, not ignored (a typo in
    a filter would otherwise list every request as if it matched)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, max_length=200,
                              description="A model id: the one asked for, or the fallback that answered.")
    key_id: str | None = Field(default=None, max_length=200, description="The API key's id (`ctl keys list`).")
    status: str | None = Field(default=None, pattern=STATUS_PATTERN,
                               description="An HTTP status (404) or a class of them (5xx).")
    slower_than_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                         description="Only requests that took longer than this in all.")
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="At most this many rows.")

    def status_range(self) -> tuple[int, int] | None:
        """The statuses ``status`` stands for, lowest and highest; None: any."""
        if self.status is None:
            return None
        if self.status.endswith("xx"):
            low = int(self.status[0]) * 100
            return low, low + 99
        return int(self.status), int(self.status)

    def matches(self, record: RequestRecord) -> bool:
        """Whether the daemon's query would list ``record`` (the demo daemon filters with this)."""
        statuses = self.status_range()
        return ((self.model is None or self.model in (record.model, record.answered_by))
                and (self.key_id is None or record.key_id == self.key_id)
                and (statuses is None or statuses[0] <= record.status <= statuses[1])
                and (self.slower_than_ms is None
                     or (record.total_ms is not None and record.total_ms > self.slower_than_ms)))


def served_by(record: RequestRecord) -> str | None:
    """The model that answered: the fallback when one did, else the one asked for."""
    return record.answered_by or record.model


def tokens(record: RequestRecord) -> str:
    """``412 + 243`` (prompt + completion), or ``—`` when the runtime said nothing."""
    if record.prompt_tokens is None and record.completion_tokens is None:
        return "—"
    return f"{record.prompt_tokens if record.prompt_tokens is not None else '?'} + " \
           f"{record.completion_tokens if record.completion_tokens is not None else '?'}"


def status_text(status: int) -> str:
    """``404 Not Found``; 499 (nginx's "client closed request", not in HTTP's own list) said in words."""
    if status == 499:
        return "499 — the client closed the connection"
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def millis(value: float | None) -> str:
    """A duration for people: ``840 ms``, ``2.4 s``, or ``—`` when it did not happen."""
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"
