"""The DNS-rebinding check of every port the daemon serves clients on: on loopback, loopback names only.

A page on evil.example whose name resolves to 127.0.0.1 must not drive the daemon, and a browser
page from another site gets no answer (no CORS). ``daemon.server`` answers a refusal in the OpenAI
shape for /v1 and /api, ``daemon.ollama`` in Ollama's for its own port.
"""

from __future__ import annotations

import logging

from aiohttp import web

from daemon.config import DaemonConfig

_LOGGER = logging.getLogger(__name__)

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


def host_of(header: str) -> str:
    """The host part of a Host header (or of an Origin without its scheme)."""
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def refusal(config: DaemonConfig, request: web.Request) -> tuple[int, str, str] | None:
    """(status, code, message) when the daemon listens on loopback only and the request names
    another host, or comes from a page of another site; None when it may pass."""
    if not config.loopback_only:
        return None
    if host_of(request.headers.get("Host", "")).lower() not in LOOPBACK_HOSTS:
        return 403, "host_not_allowed", "Host header not allowed: use localhost, 127.0.0.1 or [::1]."
    origin = request.headers.get("Origin")
    if origin is not None and host_of(origin.split("://", 1)[-1]).lower() not in LOOPBACK_HOSTS:
        return 403, "origin_not_allowed", "Cross-origin requests are not allowed."
    return None
