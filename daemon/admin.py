"""Handlers of the admin API under ``/api`` (admin token required); the routes are in ``daemon.routes``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import TYPE_CHECKING

from aiohttp import web

from agent.api.client import AgentError
from daemon.api.models import (
    ApiKeyCreate,
    DaemonSettings,
    ModelDefinition,
    ModelState,
    ModelView,
    StatusResponse,
)
from daemon.errors import (
    DaemonProblem,
    error_response,
    json_response,
    read_json,
    validated,
)
from daemon.jobs.api import JobsApi
from daemon.sources.api import SourcesApi

if TYPE_CHECKING:
    from daemon.server import Daemon

_LOGGER = logging.getLogger(__name__)

MAX_ADMIN_BODY = 1024 * 1024


async def _body(request: web.Request) -> object:
    return await read_json(request, MAX_ADMIN_BODY)


class AdminApi:
    def __init__(self, daemon: "Daemon") -> None:
        self.d = daemon
        self.sources = SourcesApi(daemon)  # fit, downloads, imports, transfers: daemon.sources.api
        self.jobs = JobsApi(daemon)

    # --- status and events ---------------------------------------------------------------------
    async def status(self, request: web.Request) -> web.Response:
        d = self.d
        return json_response(StatusResponse(daemon=d.info(), models=d.orchestrator.all_statuses(),
                                    router=d.router.stats, hosts=d.telemetry.hosts(),
                                    last_event_id=d.events.last_id))

    async def events(self, request: web.Request) -> web.Response:
        since = _int(request, "since", 0)
        timeout = min(max(float(request.query.get("timeout", "30")), 0.0), 60.0)
        return json_response(await self.d.events.wait(since, timeout))

    # --- models --------------------------------------------------------------------------------
    def _view(self, definition: ModelDefinition) -> ModelView:
        return ModelView(definition=definition, status=self.d.orchestrator.status(definition))

    async def list_models(self, request: web.Request) -> web.Response:
        views = [self._view(m).model_dump(mode="json") for m in self.d.registry.all()]
        return web.json_response(views)

    async def _definition(self, request: web.Request) -> ModelDefinition:
        return validated(ModelDefinition, await _body(request), "invalid_model")

    async def create_model(self, request: web.Request) -> web.Response:
        definition = await self.d.registry.add(await self._definition(request))
        self.d.events.publish("model.added", definition.id)
        await self.d.history.audit("admin", "model.add", definition.id)
        return json_response(self._view(definition), status=201)

    async def get_model(self, request: web.Request) -> web.Response:
        return json_response(self._view(self.d.registry.require(request.match_info["id"])))

    async def update_model(self, request: web.Request) -> web.Response:
        definition = await self._definition(request)
        if definition.id != request.match_info["id"]:
            raise DaemonProblem(400, "id_mismatch", "The id in the body differs from the id in the path.")
        definition = await self.d.registry.update(definition)
        self.d.events.publish("model.updated", definition.id)
        await self.d.history.audit("admin", "model.update", definition.id)
        self.d.orchestrator.on_instances(definition.node, {})
        return json_response(self._view(definition))

    async def delete_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        definition = self.d.registry.require(model_id)
        if self.d.orchestrator.status(definition).state not in (ModelState.STOPPED, ModelState.FAILED) \
                or self.d.orchestrator.instance(definition) is not None:
            await self.d.orchestrator.stop(model_id)
        await self.d.registry.remove(model_id)
        self.d.events.publish("model.removed", model_id)
        await self.d.history.audit("admin", "model.remove", model_id)
        return web.Response(status=204)

    async def start_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        force = request.query.get("force") in ("1", "true")  # past memory admission
        status = await self.d.orchestrator.start(model_id, force=force)
        await self.d.history.audit("admin", "model.start", model_id, "forced" if force else "")
        if request.query.get("wait") in ("1", "true"):
            definition = self.d.registry.require(model_id)
            status = await self.d.orchestrator.wait_settled(model_id, definition.startup_timeout_s + 5)
        return json_response(status, status=202 if status.state == ModelState.STARTING else 200)

    async def stop_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        status = await self.d.orchestrator.stop(model_id)
        await self.d.history.audit("admin", "model.stop", model_id)
        return json_response(status)

    async def shutdown(self, request: web.Request) -> web.Response:
        """End the daemon process (``mirbadllm ctl daemon stop``); its models keep running and are
        adopted at the next start unless ``stop_models``. Answers before the listener closes."""
        stopped: list[str] = []
        if request.query.get("stop_models") in ("1", "true"):
            for definition in self.d.registry.all():
                if self.d.orchestrator.status(definition).state != ModelState.STOPPED:
                    await self.d.orchestrator.stop(definition.id)
                    stopped.append(definition.id)
        await self.d.history.audit("admin", "daemon.shutdown", "", ", ".join(stopped))
        asyncio.get_running_loop().call_soon(self.d.shutdown_requested.set)
        return web.json_response({"pid": os.getpid(), "stopped_models": stopped}, status=202)

    async def restart_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        status = await self.d.orchestrator.restart(model_id)
        await self.d.history.audit("admin", "model.restart", model_id)
        return json_response(status, status=202 if status.state == ModelState.STARTING else 200)

    async def model_logs(self, request: web.Request) -> web.StreamResponse:
        definition = self.d.registry.require(request.match_info["id"])
        link = self.d.orchestrator.links.get(definition.node)
        if link is None or not link.online:
            return error_response(503, "node_offline", f"node '{definition.node}' is not reachable")
        tail = min(_int(request, "tail", 200), 5000)
        follow = request.query.get("follow") in ("1", "true")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async for line in link.client.logs(definition.id, tail=tail, follow=follow):
                await response.write(f"data: {json.dumps(line)}\n\n".encode())
        except AgentError as exc:
            if exc.status != 404:
                await response.write(f"event: error\ndata: {json.dumps(exc.message)}\n\n".encode())
        except ConnectionResetError:
            pass
        return response

    async def model_history(self, request: web.Request) -> web.Response:
        self.d.registry.require(request.match_info["id"])
        return json_response(await self.d.history.series("model", request.match_info["id"], _range(request)))

    async def node_history(self, request: web.Request) -> web.Response:
        return json_response(await self.d.history.series("node", request.match_info["id"], _range(request)))

    # --- keys and settings ---------------------------------------------------------------------
    async def list_keys(self, request: web.Request) -> web.Response:
        last_24h = await self.d.history.key_usage(time.time() - 86400)
        return web.json_response([k.model_dump() for k in self.d.keys.list(last_24h)])

    async def create_key(self, request: web.Request) -> web.Response:
        body = validated(ApiKeyCreate, await _body(request), "invalid_key_request")
        created = self.d.keys.create(body.name)
        self.d.events.publish("keys.changed")
        await self.d.history.audit("admin", "key.create", created.info.id)
        return json_response(created, status=201)

    async def revoke_key(self, request: web.Request) -> web.Response:
        key_id = request.match_info["id"]
        if not self.d.keys.revoke(key_id):
            return error_response(404, "key_not_found", f"no API key with id '{key_id}'")
        self.d.events.publish("keys.changed")
        await self.d.history.audit("admin", "key.revoke", key_id)
        return web.Response(status=204)

    async def get_settings(self, request: web.Request) -> web.Response:
        return json_response(self.d.config.settings())

    async def put_settings(self, request: web.Request) -> web.Response:
        settings = validated(DaemonSettings, await _body(request), "invalid_settings")
        if settings.lan_access and not self.d.keys.list():
            raise DaemonProblem(409, "keys_required", "Create an API key first: /v1 on the LAN always requires keys.")
        await self.d.apply_settings(settings)
        self.d.events.publish("settings.changed", **settings.model_dump())
        await self.d.history.audit("admin", "settings.update", "", json.dumps(settings.model_dump()))
        return json_response(self.d.config.settings())

    async def recent_requests(self, request: web.Request) -> web.Response:
        rows = await self.d.history.recent_requests(min(_int(request, "limit", 100), 1000))
        return web.json_response([r.model_dump() for r in rows])


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError as exc:
        raise DaemonProblem(400, "invalid_parameter", f"'{name}' must be an integer") from exc


def _range(request: web.Request) -> str:
    value = request.query.get("range", "5m")
    if value not in ("5m", "1h", "24h", "7d"):
        raise DaemonProblem(400, "invalid_parameter", "range must be one of 5m, 1h, 24h, 7d")
    return value

