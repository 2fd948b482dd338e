"""Errors in the OpenAI shape, ``{"error": {"message", "type", "code"}}``, for /v1 and /api alike.

Inside a request the error also carries that request's id (``request_id``, the same value as the
``X-Request-Id`` header), so a report of a failure can be matched with the daemon log.
"""

from __future__ import annotations

import contextvars
import logging

from aiohttp import web

_LOGGER = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable"}

# Set by the request-id middleware; each request runs in its own task, so this is per request.
CURRENT_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


def error_response(status: int, code: str, message: str, *, type_: str | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    err_type = type_ or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error: dict[str, object] = {"message": message, "type": err_type, "code": code}
    request_id = CURRENT_REQUEST_ID.get()
    if request_id is not None:
        error["request_id"] = request_id
    return web.json_response({"error": error}, status=status, headers=headers)


def internal_error(request: web.Request, exc: BaseException) -> web.Response:
    """The answer to an exception no handler expected: logged with its traceback, never shown."""
    request_id = CURRENT_REQUEST_ID.get() or "-"
    _LOGGER.error("request %s: %s %s failed: %s: %s", request_id, request.method, request.path,
                  type(exc).__name__, exc, exc_info=exc)
    return error_response(500, "internal_error",
                          f"The daemon failed on {request.method} {request.path} (request id {request_id}); "
                          "the daemon log has the details.")
