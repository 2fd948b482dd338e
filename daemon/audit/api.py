"""``GET /api/audit``: the audit log, newest first, a page at a time (route in ``daemon.routes``).

Query: ``since`` / ``until`` (Unix time, inclusive), ``actor``, ``action`` (exact, or a group such
as ``model`` for every ``model.*``), ``subject``, ``limit`` (1 to 1000, default 100) and ``before``
(an entry id: the page older than it; a page's ``next_before``). A bad value is 400 ``invalid_parameter``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from daemon.api.audit import DEFAULT_LIMIT, MAX_LIMIT
from daemon.audit.log import AuditLog, AuditQuery
from daemon.errors import DaemonProblem, json_response

MAX_TEXT = 200
N = TypeVar("N", int, float)


def _bad(name: str, why: str) -> DaemonProblem:
    return DaemonProblem(400, "invalid_parameter", f"'{name}' {why}")


def _number(request: web.Request, name: str, read: Callable[[str], N], why: str) -> N | None:
    """The query parameter ``name`` as ``read`` reads it, None when absent or empty; else 400 ``why``."""
    text = request.query.get(name)
    if text is None or text == "":
        return None
    try:
        return read(text)
    except ValueError as exc:
        raise _bad(name, why) from exc


def _time(request: web.Request, name: str) -> float | None:
    value = _number(request, name, float, "must be a Unix time in seconds")
    if value is not None and (not math.isfinite(value) or value < 0):
        raise _bad(name, "must be a Unix time in seconds")
    return value


def _int(request: web.Request, name: str, default: int | None, low: int, high: int) -> int | None:
    value = _number(request, name, int, "must be an integer")
    if value is None:
        return default
    if not low <= value <= high:
        raise _bad(name, f"must be between {low} and {high}")
    return value


def _text(request: web.Request, name: str) -> str | None:
    text = request.query.get(name)
    if text is not None and len(text) > MAX_TEXT:
        raise _bad(name, f"is longer than {MAX_TEXT} characters")
    return text or None


def parse_query(request: web.Request) -> AuditQuery:
    since, until = _time(request, "since"), _time(request, "until")
    if since is not None and until is not None and since > until:
        raise _bad("since", "is after 'until'")
    limit = _int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    assert limit is not None
    return AuditQuery(since=since, until=until, actor=_text(request, "actor"), action=_text(request, "action"),
                      subject=_text(request, "subject"), limit=limit,
                      before=_int(request, "before", None, 1, 2**63 - 1))


class AuditApi:
    def __init__(self, log: AuditLog) -> None:
        self._log = log

    async def list_audit(self, request: web.Request) -> web.Response:
        return json_response(await self._log.query(parse_query(request)))
