"""Who is acting: the client of the admin-API call being answered, or the daemon itself.

The ``actor_middleware`` (``daemon.server``) sets ``CURRENT_ACTOR`` for each request from its
``X-MirbadLLM-Client`` header: ``app``, ``ctl`` or another client's own name; a call with the admin
token that names no client is ``admin token``. Anything outside an admin-API request (startup,
background loops, the /v1 router's evictions) is ``system``. A task inherits the actor of the code
that spawned it, so work started by a request is that client's; ``acting_as(ACTOR_SYSTEM)`` marks
work that is the daemon's own even though a request started it.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from daemon.api.audit import ACTOR_ADMIN_TOKEN, ACTOR_SYSTEM, CLIENT_HEADER

CURRENT_ACTOR: contextvars.ContextVar[str] = contextvars.ContextVar("audit_actor", default=ACTOR_SYSTEM)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
_RESERVED = {ACTOR_SYSTEM, "admin"}  # a client cannot pass itself off as the daemon


def actor_of(header: str | None) -> str:
    """The actor an admin-API call with this ``X-MirbadLLM-Client`` value is recorded as."""
    name = (header or "").strip()
    if not _NAME.fullmatch(name) or name.lower() in _RESERVED:
        return ACTOR_ADMIN_TOKEN
    return name.lower()


def current_actor() -> str:
    return CURRENT_ACTOR.get()


@contextlib.contextmanager
def acting_as(actor: str) -> Iterator[None]:
    token = CURRENT_ACTOR.set(actor)
    try:
        yield
    finally:
        CURRENT_ACTOR.reset(token)


@web.middleware
async def actor_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    actor = actor_of(request.headers.get(CLIENT_HEADER)) if request.path.startswith("/api/") else ACTOR_SYSTEM
    with acting_as(actor):
        response: web.StreamResponse = await handler(request)
        return response
