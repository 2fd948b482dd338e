"""Wiring of the daemon: ``Daemon`` owns the parts, ``create_app`` builds the aiohttp application
from the one route table in ``daemon.routes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from agent.api.client import AgentClient
from daemon import admin_token
from daemon.api.models import DaemonInfo, DaemonSettings
from daemon.api.program import program_version
from daemon.atomic import write_json_atomic
from daemon.config import DaemonConfig, save_settings
from daemon.errors import (
    CURRENT_REQUEST_ID,
    DaemonProblem,
    error_response,
    internal_error,
)
from daemon.events import EventBus
from daemon.nodes.links import AgentLink, LocalAgentProcess
from daemon.models.health import HealthMonitor
from daemon.models.restarts import RestartBook
from daemon.history import History
from daemon.jobs.manager import JobManager
from daemon.keys import KeyStore
from daemon.router.metrics import RouterMetrics
from daemon.nodes.manager import NodeManager
from daemon.models.orchestrator import Orchestrator
from daemon.paths import DaemonPaths
from daemon.pki import CertificateAuthority
from daemon.models.registry import Registry, assemble_demo_gguf
from daemon.router.router import REQUEST_ID, Router, note_failure, request_id_for
from daemon.routes import route_table
from daemon.telemetry import TelemetryCollector
from daemon.tls import (
    client_ssl_context,
    ensure_client_certificate,
    ensure_local_agent_identity,
)
from daemon.upgrades.manager import UpgradeManager

_LOGGER = logging.getLogger(__name__)

_VERSION = program_version()

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
MAINTENANCE_S = 60.0


class Daemon:
    """The daemon's parts, built from its config and home; started and stopped by the app context."""

    def __init__(self, config: DaemonConfig, paths: DaemonPaths) -> None:
        self.config = config
        self.paths = paths
        self.started_at = time.time()
        self.events = EventBus(config.event_ring)
        self.registry = Registry(paths.models)
        self.keys = KeyStore(paths.keys)
        self.history = History(paths.history)
        self.metrics = RouterMetrics()
        self.orchestrator = Orchestrator(self.registry, self.events, RestartBook(paths.home))
        self.router = Router(self.orchestrator, self.keys, config, self.history, self.metrics)
        self.health = HealthMonitor(self.orchestrator, config.health, self.router.in_flight)
        self.orchestrator.listeners.append(self.health.observe)
        self.telemetry = TelemetryCollector(self.orchestrator.links, self.history, config.history_interval_s)
        self.nodes = NodeManager(self)  # paired nodes join orchestrator.links under their node ids
        self.registry.known_nodes = self.nodes.names  # a model is saved only on a node that exists
        self.upgrades = UpgradeManager(self)  # agent rollouts over the paired nodes, one at a time
        self.jobs = JobManager(self.orchestrator, self.events, self.router.in_flight, self.telemetry, paths.home)
        self.orchestrator.maintenance = self.jobs.maintenance  # read by the router and the health monitor
        self.admin_token = ""
        self.local_agent: LocalAgentProcess | None = None
        self.runner: web.AppRunner | None = None
        self.site: web.TCPSite | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.shutdown_requested = asyncio.Event()  # POST /api/shutdown; `mirbadllm daemon` exits on it

    def info(self) -> DaemonInfo:
        host = "127.0.0.1" if self.config.loopback_only else self.config.bind_host
        return DaemonInfo(version=_VERSION, host=self.config.bind_host, port=self.config.port,
                          api_url=f"http://{host}:{self.config.port}/v1",
                          keys_required=self.config.keys_required, started_at=self.started_at,
                          home=str(self.paths.home))

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self.paths.ensure()
        self.admin_token = admin_token.load_or_create(self.paths.admin_token)
        self.spawn(admin_token.store_in_keychain(self.paths.home, self.admin_token))
        self.keys.load()
        self.orchestrator.book.load()
        if not self.registry.load() and self.config.seed_demo_model:
            models_dir = self.paths.local_agent_home / "models"
            gguf = await asyncio.get_running_loop().run_in_executor(None, assemble_demo_gguf, models_dir)
            if gguf is not None:
                self.registry.seed_demo(gguf)
        await self.history.open()
        await self.router.open()
        if self.config.local_agent:
            await self._start_local_agent()
        self.spawn(self.telemetry.run())
        self.spawn(self.orchestrator.auto_start())
        self.spawn(self.health.run())
        self.spawn(self._maintenance())
        await self.nodes.start()
        self.spawn(self.jobs.recover())

    async def _start_local_agent(self) -> None:
        ca = CertificateAuthority.load_or_create(self.paths.pki)
        key, cert = ensure_client_certificate(ca, self.paths.pki)
        ensure_local_agent_identity(ca, self.paths.local_agent_home / "identity")
        self.local_agent = LocalAgentProcess(self.paths.local_agent_home, self.paths.logs / "agent.log",
                                             self.config.llama_server, self.config.telemetry_interval_s,
                                             self.config.runtime_first_port)
        await self.local_agent.spawn()
        self.spawn(self.local_agent.supervise())
        client = AgentClient(self.local_agent.url, client_ssl_context(self.paths.pki / "ca.crt", key, cert))
        link = AgentLink("local", client, self.orchestrator.on_instances)
        self.orchestrator.links["local"] = link
        self.spawn(link.run())

    def spawn(self, coro: Any) -> None:
        """Run a background task that stops with the daemon."""
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def _maintenance(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.history.flush()
            self.keys.flush_usage()
            if int(time.monotonic()) % int(MAINTENANCE_S) == 0:
                await self.history.maintain()

    async def stop(self) -> None:
        await self.jobs.close()  # a running job restores its model while the links still work
        await self.upgrades.close()
        await self.nodes.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for link in self.orchestrator.links.values():
            await link.client.close()
        if self.local_agent is not None:
            await self.local_agent.stop()  # models keep running; the next agent adopts them
        await self.router.close()
        self.keys.flush_usage()
        await self.history.close()

    # --- run-time settings ---------------------------------------------------------------------
    async def apply_settings(self, settings: DaemonSettings) -> None:
        before = self.config.bind_host
        self.config.lan_access = settings.lan_access
        self.config.require_api_keys = settings.require_api_keys
        save_settings(self.paths.config, settings)
        if self.runner is not None and self.site is not None and before != self.config.bind_host:
            await self.site.stop()
            self.site = web.TCPSite(self.runner, self.config.bind_host, self.config.port)
            await self.site.start()
            self.write_info()
            _LOGGER.info("now listening on %s:%s", self.config.bind_host, self.config.port)

    def write_info(self) -> None:
        import os

        host = "127.0.0.1" if self.config.loopback_only else self.config.bind_host
        write_json_atomic(self.paths.daemon_info, {
            "admin_url": f"http://{host}:{self.config.port}",
            "api_url": f"http://{host}:{self.config.port}/v1", "pid": os.getpid()})


# --- middlewares -------------------------------------------------------------------------------
def _host_of(header: str) -> str:
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _middlewares(daemon: Daemon) -> list[Any]:
    @web.middleware
    async def request_id(request: web.Request, handler: Any) -> web.StreamResponse:
        request[REQUEST_ID] = request_id_for(request)
        CURRENT_REQUEST_ID.set(request[REQUEST_ID])  # error bodies carry it (daemon.errors)
        response: web.StreamResponse = await handler(request)
        if not response.prepared:  # a streamed one got it in on_response_prepare
            response.headers["X-Request-Id"] = request[REQUEST_ID]
        return response

    @web.middleware
    async def host_check(request: web.Request, handler: Any) -> web.StreamResponse:
        # DNS rebinding: a page on evil.example that resolves to 127.0.0.1 must not drive us.
        if daemon.config.loopback_only:
            if _host_of(request.headers.get("Host", "")).lower() not in LOOPBACK_HOSTS:
                return error_response(403, "host_not_allowed",
                                      "Host header not allowed: use localhost, 127.0.0.1 or [::1].")
            origin = request.headers.get("Origin")
            if origin is not None and _host_of(origin.split("://", 1)[-1]).lower() not in LOOPBACK_HOSTS:
                # A browser page from another site: no CORS, and no answer either.
                return error_response(403, "origin_not_allowed", "Cross-origin requests are not allowed.")
        return await handler(request)

    @web.middleware
    async def admin_auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/api/") and not admin_token.matches(
                daemon.admin_token, request.headers.get("Authorization")):
            return error_response(401, "invalid_admin_token",
                                  "The admin API needs 'Authorization: Bearer <admin token>' "
                                  f"(the token is in {daemon.paths.admin_token}).")
        return await handler(request)

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except DaemonProblem as problem:
            return problem.response()
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
    return [request_id, daemon.router.access_log, errors, host_check, admin_auth]


class Probes:
    """``/healthz`` and ``/metrics``."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": _VERSION})

    async def metrics(self, request: web.Request) -> web.Response:
        for definition in self.d.registry.all():
            ready = self.d.orchestrator.status(definition).state.value == "ready"
            self.d.metrics.model_ready.labels(definition.served_name).set(1 if ready else 0)
        return web.Response(body=self.d.metrics.render(), content_type="text/plain", charset="utf-8")


def create_app(daemon: Daemon) -> web.Application:
    app = web.Application(middlewares=_middlewares(daemon))
    app.add_routes(route_table(daemon, Probes(daemon)))

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if REQUEST_ID in request:
            response.headers["X-Request-Id"] = request[REQUEST_ID]

    app.on_response_prepare.append(on_prepare)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        await daemon.start()
        yield
        await daemon.stop()

    app.cleanup_ctx.append(lifecycle)
    return app




async def start_server(daemon: Daemon) -> web.AppRunner:
    """Build the app, start it (which starts the daemon's parts) and listen; returns the runner."""
    # handler_cancellation: a client that disconnects cancels its handler, which closes the
    # upstream connection, which makes the runtime free its slot.
    runner = web.AppRunner(create_app(daemon), handler_cancellation=True, access_log=None)
    await runner.setup()
    daemon.runner = runner
    daemon.site = web.TCPSite(runner, daemon.config.bind_host, daemon.config.port)
    try:
        await daemon.site.start()
    except OSError:
        await runner.cleanup()
        raise
    if daemon.config.port == 0:  # tests: learn the port the OS gave us
        server = getattr(daemon.site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            daemon.config.port = sockets[0].getsockname()[1]
    daemon.write_info()
    return runner
