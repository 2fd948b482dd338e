"""The daemon as an aiohttp application: its middlewares, the one route table, and its listener.

The parts come from the composition root (``daemon.deps``); ``create_app`` installs the middlewares
(request id, the /v1 access log, errors in the API's shape, a node agent's failure among them
through ``daemon.nodes.agent_errors``, the DNS-rebinding host check, the admin token) and the route
table of ``daemon.routes``, and ties the parts' start and stop to the app's. ``start_server`` also
starts the Ollama API's app (``daemon.ollama.app``) on its own port, which stops with this one.
Only the entry point (``daemon.main``) and tests import this module.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from agent.api.client import AgentError
from daemon import admin_token, deps
from daemon.admin_lane import StatusLane
from daemon.api.audit import ACTOR_SYSTEM
from daemon.audit.actor import CURRENT_ACTOR, acting_as, actor_middleware
from daemon.deps import DaemonDeps
from daemon.errors import (
    CURRENT_REQUEST_ID,
    DaemonProblem,
    error_response,
    internal_error,
)
from daemon.host_check import refusal as host_check_refusal
from daemon.nodes.agent_errors import agent_problem
from daemon.ollama.app import create_ollama_app
from daemon.router.router import REQUEST_ID, note_failure, request_id_for
from daemon.routes import route_table

SHUTDOWN_GRACE_S = 0.5


# --- middlewares -------------------------------------------------------------------------------
def _middlewares(d: DaemonDeps) -> list[Any]:
    @web.middleware
    async def request_id(request: web.Request, handler: Any) -> web.StreamResponse:
        request[REQUEST_ID] = request_id_for(request)
        CURRENT_REQUEST_ID.set(request[REQUEST_ID])  # error bodies carry it (daemon.errors)
        response: web.StreamResponse = await handler(request)
        if not response.prepared:  # a streamed one got it in on_response_prepare
            response.headers["X-Request-Id"] = request[REQUEST_ID]
        return response

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        """The host check, then for the admin API its token and who acts (``actor_middleware``):
        one middleware, so a /v1 request passes one level where it passed three."""
        refused = host_check_refusal(d.config, request)  # DNS rebinding, another site's page (daemon.host_check)
        if refused is not None:
            return error_response(*refused)
        if not request.path.startswith("/api/"):
            if CURRENT_ACTOR.get() == ACTOR_SYSTEM:
                return await handler(request)  # type: ignore[no-any-return]
            with acting_as(ACTOR_SYSTEM):
                return await handler(request)  # type: ignore[no-any-return]
        if not admin_token.matches(d.admin_token, request.headers.get("Authorization")):
            return error_response(401, "invalid_admin_token",
                                  "The admin API needs 'Authorization: Bearer <admin token>' "
                                  f"(the token is in {d.paths.admin_token}).")
        return await actor_middleware(request, handler)

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except DaemonProblem as problem:
            return problem.response()
        except AgentError as exc:  # a node's agent failed and no handler had more to do about it
            return agent_problem(exc).response()
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, "request_too_large", "Request body is too large.")
        except web.HTTPException as exc:
            if exc.status >= 400:
                return error_response(exc.status, exc.reason.lower().replace(" ", "_"),
                                      f"{exc.reason}: {request.method} {request.path}")
            raise
        except ConnectionResetError:
            raise  # the client went away: nobody to answer (the access log records 499)
        except Exception as exc:  # noqa: BLE001 - anything else still answers in the API's shape
            note_failure(request, f"{type(exc).__name__}: {exc}")
            return internal_error(request, exc)

    # The access log (/v1 only) sits outside the error handler, so it records what the client got.
    return [request_id, d.router.access_log, errors, guard]


STATUS_BODY: web.AppKey[Callable[[], str]] = web.AppKey("status_body")  # the admin lane's GET /api/status (daemon.admin_lane)


def create_app(d: DaemonDeps) -> web.Application:
    app = web.Application(middlewares=_middlewares(d))
    handlers = deps.handlers(d)
    app.add_routes(route_table(handlers))
    app[STATUS_BODY] = handlers.admin.status_body

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if REQUEST_ID in request:
            response.headers["X-Request-Id"] = request[REQUEST_ID]

    app.on_response_prepare.append(on_prepare)

    async def stop_ollama(_app: web.Application) -> None:
        await d.listener.stop_ollama()  # its calls go through /v1: it stops with it

    async def end_streams(_app: web.Application) -> None:
        # A stop (a restart, an update): the streams in flight get the grace to finish, then each
        # still running gets a `server_stopping` error event before its connection is cut.
        await d.router.endings.finish(SHUTDOWN_GRACE_S)

    app.on_shutdown.append(end_streams)
    app.on_shutdown.append(stop_ollama)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        await deps.start(d)
        yield
        await deps.stop(d)

    app.cleanup_ctx.append(lifecycle)
    return app


async def start_server(d: DaemonDeps) -> web.AppRunner:
    """Build the app, start it (which starts the daemon's parts) and listen; returns the runner."""
    # handler_cancellation: a client that disconnects cancels its handler, which closes the
    # upstream connection, which makes the runtime free its slot.
    # A stop gives requests still running SHUTDOWN_GRACE_S to end (the models keep running).
    runner = web.AppRunner(create_app(d), handler_cancellation=True, access_log=None,
                           shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        # Not on Windows: its proactor loop may have read past a paused connection, which a hand-over would lose.
        lane = None if sys.platform == "win32" else StatusLane(d.config, d.admin_token, runner.app[STATUS_BODY])
        await d.listener.start(runner, lane)
    except OSError:
        await runner.cleanup()
        raise
    ollama = web.AppRunner(create_ollama_app(deps.ollama(d), d.config), handler_cancellation=True,
                           access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await ollama.setup()
    if not await d.listener.start_ollama(ollama):  # off, or its port taken: /v1 serves on regardless
        await d.listener.stop_ollama()
    return runner
