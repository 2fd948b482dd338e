"""Handlers of the daemon-wide admin API under ``/api`` (admin token required): status, events, API keys,
settings, the access log (recent requests, filtered, and one by its X-Request-Id) and shutdown. The routes are in ``daemon.routes``; models, nodes, sources,
jobs and upgrades have their own handlers in their folders.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from aiohttp import web

from core.key_store import KeysAtRest
from daemon.api.access_log import RequestFilters
from daemon.api.models import (
    ApiKeyCreate,
    ApiKeyInfo,
    ApiKeyLimits,
    DaemonSettings,
    ModelState,
    RequestRecord,
    RouterStats,
    StatusResponse,
)
from daemon.config import DaemonConfig
from daemon.errors import (
    DaemonProblem,
    error_response,
    json_response,
    query_int,
    read_body,
    validated,
)
from daemon.events import EventBus
from daemon.history import REQUESTS_KEEP_S, History
from daemon.keys import KeyStore
from daemon.listener import Listener
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry
from daemon.telemetry import TelemetryCollector

MAX_ADMIN_BODY = 1024 * 1024


class AdminApi:
    def __init__(self, config: DaemonConfig, listener: Listener, registry: Registry, orchestrator: Orchestrator,
                 router_stats: Callable[[], dict[str, RouterStats]], telemetry: TelemetryCollector,
                 events: EventBus, keys: KeyStore, history: History, shutdown_requested: asyncio.Event,
                 keys_at_rest: Callable[[], KeysAtRest | None] = lambda: None) -> None:
        self._config = config
        self._listener = listener
        self._registry = registry
        self._orchestrator = orchestrator
        self._router_stats = router_stats
        self._telemetry = telemetry
        self._events = events
        self._keys = keys
        self._history = history
        self._shutdown_requested = shutdown_requested  # POST /api/shutdown; `mirbadllm daemon` exits on it
        self._keys_at_rest = keys_at_rest  # daemon.tls.keys_at_rest: keychain or 0600 files (+ a warning)

    # --- status and events ---------------------------------------------------------------------
    async def status(self, request: web.Request) -> web.Response:
        return web.Response(text=self.status_body(), content_type="application/json")

    def status_body(self) -> str:
        """``GET /api/status``'s JSON, also built off the loop by ``daemon.admin_lane`` (it only reads).
        The last event id is read first: a change after it is in its events, never missed by them."""
        last_event_id = self._events.last_id
        names = self._registry.known_nodes() if self._registry.known_nodes is not None else {}
        hosts = [h.model_copy(update={"node_name": names.get(h.node, h.node[:12])}) for h in self._telemetry.hosts()]
        return StatusResponse(daemon=self._listener.info(), models=self._orchestrator.all_statuses(),
                              router=self._router_stats(), hosts=hosts, last_event_id=last_event_id,
                              keys_at_rest=self._keys_at_rest()).model_dump_json()

    async def events(self, request: web.Request) -> web.Response:
        since = query_int(request, "since", 0)
        timeout = min(max(float(request.query.get("timeout", "30")), 0.0), 60.0)
        return json_response(await self._events.wait(since, timeout))

    async def shutdown(self, request: web.Request) -> web.Response:
        """End the daemon process (``mirbadllm ctl daemon stop``); its models keep running and are
        adopted at the next start unless ``stop_models``. Answers before the listener closes."""
        stopped: list[str] = []
        if request.query.get("stop_models") in ("1", "true"):
            for definition in self._registry.all():
                if self._orchestrator.status(definition).state != ModelState.STOPPED:
                    await self._orchestrator.stop(definition.id)
                    stopped.append(definition.id)
        await self._history.audit("admin", "daemon.shutdown", "", ", ".join(stopped))
        asyncio.get_running_loop().call_soon(self._shutdown_requested.set)
        return web.json_response({"pid": os.getpid(), "stopped_models": stopped}, status=202)

    # --- keys and settings ---------------------------------------------------------------------
    async def list_keys(self, request: web.Request) -> web.Response:
        last_24h = await self._history.key_usage(time.time() - 86400)
        return web.json_response([k.model_dump() for k in self._keys.list(last_24h)])

    async def create_key(self, request: web.Request) -> web.Response:
        body = await read_body(request, ApiKeyCreate, MAX_ADMIN_BODY, "invalid_key_request")
        same = next((k for k in self._keys.list() if k.name.casefold() == body.name.strip().casefold()), None)
        if same is not None:  # a name is how people and `ctl keys limit|revoke NAME` tell keys apart
            raise DaemonProblem(409, "key_name_taken", f"An API key named '{same.name}' exists ({same.id}): "
                                "give this one another name, or revoke that one first.")
        created = self._keys.create(body.name.strip(), body.limits)
        self._events.publish("keys.changed")
        await self._history.audit("admin", "key.create", created.info.id, after=_key_record(created.info))
        return json_response(created, status=201)

    async def set_key_limits(self, request: web.Request) -> web.Response:
        """``PATCH /api/keys/{id}``: the fields sent change, null clears one, the rest stay."""
        key_id = request.match_info["id"]
        update = await read_body(request, ApiKeyLimits, MAX_ADMIN_BODY, "invalid_key_limits")
        previous = next((k.limits for k in self._keys.list() if k.id == key_id), None)
        info = self._keys.set_limits(key_id, update)
        if info is None:
            return error_response(404, "key_not_found", f"no API key with id '{key_id}'")
        used = (await self._history.key_usage(time.time() - 86400)).get(key_id, (0, 0))
        info = info.model_copy(update={"requests_24h": used[0], "tokens_24h": used[1]})
        self._events.publish("keys.changed")
        await self._history.audit("admin", "key.limits", key_id, before=previous, after=info.limits)
        return json_response(info)

    async def revoke_key(self, request: web.Request) -> web.Response:
        key_id = request.match_info["id"]
        record = next((_key_record(k) for k in self._keys.list() if k.id == key_id), None)
        if not self._keys.revoke(key_id):
            return error_response(404, "key_not_found", f"no API key with id '{key_id}'")
        self._events.publish("keys.changed")
        await self._history.audit("admin", "key.revoke", key_id, before=record)
        return web.Response(status=204)

    async def get_settings(self, request: web.Request) -> web.Response:
        return json_response(self._config.settings())

    async def put_settings(self, request: web.Request) -> web.Response:
        settings = await read_body(request, DaemonSettings, MAX_ADMIN_BODY, "invalid_settings")
        if settings.lan_access and not self._keys.list():
            raise DaemonProblem(409, "keys_required", "Create an API key first: /v1 on the LAN always requires keys.")
        previous = self._config.settings()
        await self._listener.apply(settings)
        self._events.publish("settings.changed", **self._config.settings().model_dump())
        await self._history.audit("admin", "settings.update", "", before=previous, after=self._config.settings())
        return json_response(self._config.settings())

    async def recent_requests(self, request: web.Request) -> web.Response:
        """The access log, newest first; a bad filter is 422 ``invalid_filter`` naming it."""
        query = {name: value for name, value in request.query.items() if value != ""}
        filters = validated(RequestFilters, query, "invalid_filter")
        rows = await self._history.recent_requests(filters.limit, filters)
        names = self._node_names()
        return json_response([_named(row, names) for row in rows])

    async def get_request(self, request: web.Request) -> web.Response:
        """One /v1 request by the X-Request-Id its answer carried."""
        request_id = request.match_info["id"]
        row = await self._history.request(request_id)
        if row is None:
            raise DaemonProblem(404, "request_not_found",
                                f"No /v1 request with id '{request_id[:128]}' in the access log: it keeps "
                                f"{REQUESTS_KEEP_S // 86400} days; check the id against the X-Request-Id header.")
        return json_response(_named(row, self._node_names()))

    def _node_names(self) -> dict[str, str]:
        known = self._registry.known_nodes
        return dict(known()) if known is not None else {}


def _named(row: RequestRecord, names: dict[str, str]) -> RequestRecord:
    """``row`` with its node's name (a node removed since: the start of its id, as model statuses show it)."""
    if row.node is not None:
        row.node_name = names.get(row.node, row.node if len(row.node) < 20 else row.node[:12])
    return row


def _key_record(info: ApiKeyInfo) -> dict[str, object]:
    """A key as the audit log keeps it: what names and limits it, never its secret, hash or counters."""
    return {"id": info.id, "name": info.name, "prefix": info.prefix, "created_at": info.created_at,
            "limits": info.limits.model_dump()}
