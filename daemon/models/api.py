"""Handlers of the models part of the admin API (admin token required; the routes are in ``daemon.routes``).

Definitions are the registry's (``daemon.models.registry``); start, stop and restart go through the
orchestrator, which asks the node's agent; logs stream from the agent over the node's link. A
llama.cpp definition's model file and LoRA adapters are read on its node when saved, if that node
is online (``ModelsApi._check_files``); the agent checks them again at each start.
"""

from __future__ import annotations

import json

from aiohttp import web

from agent.api.client import AgentClient, AgentError
from agent.api.runtimes import profile
from agent.api.sources import FitRequest, GgufSummary, lora_problem
from daemon.api.models import AUTO_NODE, ModelDefinition, ModelState, ModelView
from daemon.errors import (
    DaemonProblem,
    error_response,
    json_response,
    query_int,
    query_range,
    read_body,
)
from daemon.events import EventBus
from daemon.files.disk import NodeDisk
from daemon.history import History
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry, RegistryError, checked
from daemon.nodes.links import Links
from daemon.validation import DefinitionRejected, resolve_node

MAX_BODY = 1024 * 1024


class ModelsApi:
    def __init__(self, registry: Registry, orchestrator: Orchestrator, links: Links, events: EventBus,
                 history: History, disk: NodeDisk | None = None) -> None:
        self._disk = disk  # a node's model files (daemon.files): DELETE ?files=1
        self._registry = registry
        self._orchestrator = orchestrator
        self._links = links
        self._events = events
        self._history = history

    def _view(self, definition: ModelDefinition) -> ModelView:
        status = self._orchestrator.named(self._orchestrator.status(definition))
        return ModelView(definition=definition, status=status)

    async def list_models(self, request: web.Request) -> web.Response:
        views = [self._view(m).model_dump(mode="json") for m in self._registry.all()]
        return web.json_response(views)

    async def _definition(self, request: web.Request) -> ModelDefinition:
        return await read_body(request, ModelDefinition, MAX_BODY, "invalid_model")

    async def _check_files(self, definition: ModelDefinition) -> None:
        """A llama.cpp model's files, read on the node that will run it: the model a GGUF its agent
        can read (a missing file, a text file named .gguf, random bytes: 422 ``invalid_model`` with
        the node's reason, nothing saved), and each LoRA adapter a LoRA GGUF for the base model's
        architecture (``agent.api.sources.lora_problem``). Decides nothing when the node is offline
        or "auto", or its agent cannot say: the agent checks again at each start."""
        if not profile(definition.runtime).reads_gguf:
            return
        checked(definition)  # its own refusals first, before any node is asked
        node = definition.node
        if self._registry.known_nodes is not None:
            try:
                node = resolve_node(node, self._registry.known_nodes())
            except DefinitionRejected:
                return  # the registry refuses it, saying why
        link = self._links.get(node)
        if link is None or not link.online:
            return
        try:
            base = await self._summary(link.client, definition.model_path)
        except AgentError as exc:
            if exc.code == "invalid_model_file":  # none there, not a GGUF, not a file
                raise RegistryError(422, "invalid_model", f"model_path: {exc.message}") from exc
            return
        for adapter in definition.adapters:
            where = f"adapters: adapter '{adapter.name}' ({adapter.file[:200]})"
            try:
                summary = await self._summary(link.client, adapter.file)
            except AgentError as exc:
                if exc.code == "invalid_model_file":  # none there, or not a GGUF file the node can read
                    raise RegistryError(422, "invalid_model", f"{where}: {exc.message}") from exc
                continue
            if summary.kind is None:
                return
            problem = lora_problem(summary.kind.general_type, summary.kind.adapter_type, summary.architecture,
                                   base.architecture)
            if problem is not None:
                raise RegistryError(422, "invalid_model", f"{where} {problem}")

    @staticmethod
    async def _summary(client: AgentClient, path: str) -> GgufSummary:
        """What the node reads in the file's header (``POST /fit``; only the header is read)."""
        return (await client.fit(FitRequest(model_path=path))).summary

    async def create_model(self, request: web.Request) -> web.Response:
        definition = await self._definition(request)
        await self._check_files(definition)
        definition = await self._registry.add(definition)
        self._events.publish("model.added", definition.id)
        await self._history.audit("admin", "model.add", definition.id, after=definition)
        return json_response(self._view(definition), status=201)

    async def get_model(self, request: web.Request) -> web.Response:
        return json_response(self._view(self._registry.require(request.match_info["id"])))

    async def update_model(self, request: web.Request) -> web.Response:
        definition = await self._definition(request)
        if definition.id != request.match_info["id"]:
            raise DaemonProblem(400, "id_mismatch", "The id in the body differs from the id in the path.")
        previous = self._registry.require(definition.id)
        await self._check_files(definition)
        definition = await self._registry.update(definition)
        self._events.publish("model.updated", definition.id)
        await self._history.audit("admin", "model.update", definition.id, before=previous, after=definition)
        self._orchestrator.forget_refusal(definition.id)
        self._orchestrator.on_instances(definition.node, {})
        return json_response(self._view(definition))

    async def delete_model(self, request: web.Request) -> web.Response:
        """Stop and remove a model; with ``?files=1`` then delete its files that no other model uses and
        that lie in its node's models folder (``daemon.files.disk``), answering what went and what stayed."""
        model_id = request.match_info["id"]
        definition = self._registry.require(model_id)
        with_files = request.query.get("files") in ("1", "true")
        node, listing = self._orchestrator.placed(definition).node, None
        if with_files:  # the node's folder is read first: offline, nothing is removed at all
            if node == AUTO_NODE or self._disk is None:
                raise DaemonProblem(409, "files_unknown", f"model '{model_id}' has not run on any node yet, so "
                                    "which node's files are its own is unknown; remove it without its files")
            listing = await self._disk.listing(node)
        if self._orchestrator.status(definition).state not in (ModelState.STOPPED, ModelState.FAILED) \
                or self._orchestrator.instance(definition) is not None:
            await self._orchestrator.stop(model_id)
        await self._registry.remove(model_id)
        self._events.publish("model.removed", model_id)
        if self._disk is None or listing is None:
            await self._history.audit("admin", "model.remove", model_id, before=definition)
            return web.Response(status=204)
        removal = await self._disk.remove_files_of(definition, node, listing)
        await self._history.audit("admin", "model.remove", model_id, before=definition,
                                  detail=f"with its files: {len(removal.deleted)} deleted ({removal.freed} bytes "
                                         f"freed), {len(removal.kept)} kept")
        return json_response(removal)

    async def start_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        force = request.query.get("force") in ("1", "true")  # past memory admission
        status = await self._orchestrator.start(model_id, force=force)
        await self._history.audit("admin", "model.start", model_id, "forced" if force else "")
        if request.query.get("wait") in ("1", "true"):
            definition = self._registry.require(model_id)
            status = await self._orchestrator.wait_settled(model_id, definition.startup_timeout_s + 5)
        return json_response(status, status=202 if status.state == ModelState.STARTING else 200)

    async def stop_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        status = await self._orchestrator.stop(model_id)
        await self._history.audit("admin", "model.stop", model_id)
        return json_response(status)

    async def restart_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]
        status = await self._orchestrator.restart(model_id)
        await self._history.audit("admin", "model.restart", model_id)
        return json_response(status, status=202 if status.state == ModelState.STARTING else 200)

    async def model_logs(self, request: web.Request) -> web.StreamResponse:
        definition = self._orchestrator.placed(self._registry.require(request.match_info["id"]))  # "auto": its node
        link = self._links.get(definition.node)
        if link is None or not link.online:
            return error_response(503, "node_offline", f"node '{definition.node}' is not reachable")
        tail = min(query_int(request, "tail", 200), 5000)
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
        self._registry.require(request.match_info["id"])
        return json_response(await self._history.series("model", request.match_info["id"], query_range(request)))
