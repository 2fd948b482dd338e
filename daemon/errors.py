"""Errors in the OpenAI shape, ``{"error": {"message", "type", "code"}}``, for /v1 and /api alike.

Inside a request the error also carries that request's id (``request_id``, the same value as the
``X-Request-Id`` header), so a report of a failure can be matched with the daemon log.

``DaemonProblem(status, code, message)`` is the one error a handler or a part raises for the
client to see; the errors middleware (``daemon.server``) answers it with ``problem.response()``.
``json_response``, ``read_json`` and ``validated`` are the one way handlers answer and read bodies;
``query_int`` and ``query_range`` read query parameters.
"""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Any, TypeVar, get_args

from aiohttp import web
from pydantic import BaseModel, ValidationError

from daemon.api.models import HistoryRange

_LOGGER = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable"}

# Set by the request-id middleware; each request runs in its own task, so this is per request.
CURRENT_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


def error_body(status: int, code: str, message: str, type_: str | None = None) -> dict[str, object]:
    """The OpenAI-shaped error: ``{"error": {"message", "type", "code", "request_id"}}``."""
    err_type = type_ or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error: dict[str, object] = {"message": message, "type": err_type, "code": code}
    request_id = CURRENT_REQUEST_ID.get()
    if request_id is not None:
        error["request_id"] = request_id
    return {"error": error}


def error_response(status: int, code: str, message: str, *, type_: str | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error_body(status, code, message, type_), status=status, headers=headers)


class DaemonProblem(Exception):
    """An error the client sees: HTTP status, a stable code and a message (never a secret)."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None, *,
                 type_: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after, self.type_, self.headers = retry_after, type_, headers

    def response(self) -> web.Response:
        headers = dict(self.headers or {})
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(self.retry_after)))
        return error_response(self.status, self.code, self.message, type_=self.type_, headers=headers or None)


M = TypeVar("M", bound=BaseModel)
_NO_DEFAULT: Any = object()


def json_response(value: object, status: int = 200) -> web.Response:
    """A pydantic model, a list of them, or plain JSON data as a JSON answer."""
    if isinstance(value, BaseModel):
        text = value.model_dump_json()
    elif isinstance(value, list) and all(isinstance(v, BaseModel) for v in value):
        text = "[" + ",".join(v.model_dump_json() for v in value) + "]"
    else:
        text = json.dumps(value)
    return web.Response(text=text, status=status, content_type="application/json")


def validation_message(exc: ValidationError) -> str:
    """Field names and pydantic's messages, never the input (which may hold a secret)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())


async def read_json(request: web.Request, limit: int, empty: Any = _NO_DEFAULT) -> Any:
    """The request's JSON body, up to ``limit`` bytes (413), else 400 ``invalid_json``; an empty
    body is ``empty`` when given."""
    if request.content_length is not None and request.content_length > limit:
        raise DaemonProblem(413, "request_too_large", "Request body is too large.")
    chunks: list[bytes] = []  # read here, not by request.read(): that stops at the app's 1 MiB, not at limit
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > limit:
            raise DaemonProblem(413, "request_too_large", "Request body is too large.")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if empty is not _NO_DEFAULT and not raw.strip():
        return empty
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DaemonProblem(400, "invalid_json", f"Request body is not valid JSON: {exc.msg} "
                            f"(line {exc.lineno} column {exc.colno}).") from None
    except ValueError:
        raise DaemonProblem(400, "invalid_json", "Request body is not valid JSON.") from None


def validated(model: type[M], data: object, code: str = "invalid_request") -> M:
    """``data`` as ``model``, else 422 ``code`` naming each bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DaemonProblem(422, code, validation_message(exc)) from None


async def read_body(request: web.Request, model: type[M], limit: int, code: str = "invalid_request",
                    empty: Any = _NO_DEFAULT) -> M:
    """The request's JSON body (``read_json``) as ``model`` (``validated``, 422 ``code``)."""
    return validated(model, await read_json(request, limit, empty), code)


def internal_error(request: web.Request, exc: BaseException) -> web.Response:
    """The answer to an exception no handler expected: logged with its traceback, never shown."""
    request_id = CURRENT_REQUEST_ID.get() or "-"
    _LOGGER.error("request %s: %s %s failed: %s: %s", request_id, request.method, request.path,
                  type(exc).__name__, exc, exc_info=exc)
    return error_response(500, "internal_error",
                          f"The daemon failed on {request.method} {request.path} (request id {request_id}); "
                          "the daemon log has the details.")


HISTORY_RANGES: tuple[HistoryRange, ...] = get_args(HistoryRange)


def query_int(request: web.Request, name: str, default: int) -> int:
    """An integer query parameter, or 400 ``invalid_parameter`` naming it."""
    try:
        return int(request.query.get(name, default))
    except ValueError as exc:
        raise DaemonProblem(400, "invalid_parameter", f"'{name}' must be an integer") from exc


def query_range(request: web.Request) -> HistoryRange:
    """The ``range`` of a history query (default 5m), or 400 ``invalid_parameter``."""
    value = request.query.get("range", "5m")
    for known in HISTORY_RANGES:
        if value == known:
            return known
    raise DaemonProblem(400, "invalid_parameter", "range must be one of 5m, 1h, 24h, 7d")
