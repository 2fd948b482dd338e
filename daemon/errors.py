"""Errors in the OpenAI shape, ``{"error": {"message", "type", "code"}}``, for /v1 and /api alike."""

from __future__ import annotations

import logging

from aiohttp import web

_LOGGER = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable"}


def error_response(status: int, code: str, message: str, *, type_: str | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    err_type = type_ or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return web.json_response({"error": {"message": message, "type": err_type, "code": code}},
                             status=status, headers=headers)
