"""The Ollama API's own aiohttp app: its route table (``daemon.routes.ollama_route_table``), the Host
check every port of the daemon has, and errors in Ollama's shape, ``{"error": "..."}``.

Keys and the access log are /v1's (``daemon.ollama.api`` sends each call through it); the request id
is made here and goes along, so the caller's ``X-Request-Id`` finds the call's access-log row.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from daemon.config import DaemonConfig
from daemon.errors import CURRENT_REQUEST_ID
from daemon.host_check import refusal as host_check_refusal
from daemon.ollama.api import OllamaApi, OllamaProblem
from daemon.ollama.requests import BadRequest
from daemon.router.router import REQUEST_ID, request_id_for
from daemon.routes import ollama_route_table

_LOGGER = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _middlewares(config: DaemonConfig) -> list[Any]:
    @web.middleware
    async def request_id(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[REQUEST_ID] = request_id_for(request)
        CURRENT_REQUEST_ID.set(request[REQUEST_ID])
        response = await handler(request)
        if not response.prepared:  # a streamed one got it in on_response_prepare
            response.headers["X-Request-Id"] = request[REQUEST_ID]
        return response

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except OllamaProblem as problem:
            return error(problem.status, problem.message, problem.headers or None)
        except BadRequest as exc:
            return error(400, str(exc))
        except web.HTTPRequestEntityTooLarge:
            return error(413, f"the body is larger than {config.max_body_bytes // (1024 * 1024)} MiB")
        except web.HTTPException as exc:
            if exc.status >= 400:
                return error(exc.status, f"{exc.reason.lower()}: {request.method} {request.path} (this port answers "
                                         "Ollama's API: /api/chat, /api/generate, /api/embed, /api/tags, ...)")
            raise
        except ConnectionResetError:
            raise  # the client went away: nobody to answer
        except Exception as exc:
            _LOGGER.exception("Ollama API %s %s failed (request %s)", request.method, request.path,
                              request.get(REQUEST_ID))
            return error(500, f"internal error ({type(exc).__name__}); the daemon log has request "
                              f"{request.get(REQUEST_ID)}")

    @web.middleware
    async def host_check(request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = host_check_refusal(config, request)
        if refused is not None:
            return error(refused[0], refused[2])
        return await handler(request)

    return [request_id, errors, host_check]


def create_ollama_app(api: OllamaApi, config: DaemonConfig) -> web.Application:
    app = web.Application(middlewares=_middlewares(config), client_max_size=config.max_body_bytes)
    app.add_routes(ollama_route_table(api))

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if REQUEST_ID in request:
            response.headers["X-Request-Id"] = request[REQUEST_ID]

    app.on_response_prepare.append(on_prepare)

    async def session(_app: web.Application) -> AsyncIterator[None]:
        await api.open()
        yield
        await api.close()

    app.cleanup_ctx.append(session)
    return app
