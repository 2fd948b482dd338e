"""The admin API for getting models: will it fit, downloads, imports, and the transfers they start.

The node's agent does the file work; this module picks the node's link, forwards the request,
then follows the agent's transfers by long-poll and turns every change into an event
(``transfer.state``, ``transfer.progress``). When a transfer is done, the models it produced are
registered (``model.added``) unless the request said not to. Routes (admin token required; the
table is ``daemon.routes``):

    GET  /api/fit                       -> FitReport   # ?node=ID&path=P | &hf_repo=R&hf_file=F&revision=V; &ctx_size=N&parallel=N&n_gpu_layers=N
    POST /api/fit                       -> FitReport   # body: FitQuery
    POST /api/downloads                 -> Transfer    # body: DownloadQuery; 202
    GET  /api/imports/ollama            -> list[OllamaModelInfo]  # ?node=ID&store=PATH
    POST /api/imports/ollama            -> Transfer    # body: OllamaImportQuery; 202
    POST /api/imports/folder            -> Transfer    # body: FolderImportQuery; 202
    GET  /api/imports/lmstudio          -> list[LmStudioModelInfo]  # ?node=ID; GGUFs in LM Studio's folders
    GET  /api/transfers                 -> list[Transfer]
    GET  /api/transfers/{id}            -> Transfer
    POST /api/transfers/{id}/cancel     -> Transfer
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agent.api.client import AgentClient, AgentError
from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import (
    FINISHED_TRANSFERS,
    DownloadRequest,
    FitRequest,
    FolderImportRequest,
    HfFileRef,
    OllamaImportRequest,
    TransferInfo,
    TransferState,
)
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    FolderImportQuery,
    OllamaImportQuery,
    Transfer,
)
from daemon.errors import (
    DaemonProblem,
    M,
    error_response,
    json_response,
    read_json,
    validated,
)
from daemon.sources.registration import register_models

if TYPE_CHECKING:
    from daemon.server import Daemon

_LOGGER = logging.getLogger(__name__)

MAX_BODY = 256 * 1024
POLL_S = 20.0
Handler = Callable[[Any, web.Request], Awaitable[web.StreamResponse]]


def _answers(handler: Handler) -> Handler:
    """Agent failures as the API's own error shape."""

    @functools.wraps(handler)
    async def wrapped(self: SourcesApi, request: web.Request) -> web.StreamResponse:
        try:
            return await handler(self, request)
        except AgentError as exc:
            return error_response(exc.status or 502, exc.code, exc.message)

    return wrapped


async def _body(request: web.Request, model: type[M]) -> M:
    return validated(model, await read_json(request, MAX_BODY, empty=None))


def _as_agent(model: type[M], query: BaseModel) -> M:
    """The agent's part of a daemon query (without node and registration fields)."""
    return model.model_validate(query.model_dump(include=set(model.model_fields)))


def fit_query_from(query: Any) -> FitQuery:
    """``GET /api/fit``'s query string as a ``FitQuery``."""
    settings = {k: int(query[k]) for k in ("ctx_size", "parallel", "n_gpu_layers") if query.get(k)}
    hf = None
    if query.get("hf_repo"):
        hf = HfFileRef(repo=query["hf_repo"], file=query.get("hf_file") or None, quant=query.get("quant") or None,
                       revision=query.get("revision") or "main")
    return FitQuery(node=query.get("node") or "local", model_path=query.get("path") or None, hf=hf,
                    settings=LlamaCppSettings.model_validate(settings))


class SourcesApi:
    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.transfers: dict[str, Transfer] = {}
        self._ids = itertools.count(1)
        self._watching: set[str] = set()
        self._queries: dict[str, Any] = {}  # what to register when a transfer is done

    def _client(self, node: str) -> AgentClient:
        link = self.d.orchestrator.links.get(node)
        if link is None:
            raise DaemonProblem(404, "node_unknown", f"no node '{node}'")
        if not link.online:
            raise DaemonProblem(503, "node_offline", f"node '{node}' is offline: {link.last_error}")
        return link.client

    @_answers
    async def fit_get(self, request: web.Request) -> web.Response:
        try:
            query = fit_query_from(request.query)
        except (ValueError, ValidationError) as exc:
            raise DaemonProblem(422, "invalid_request", f"bad query: {exc}") from exc
        return await self._fit(query)

    @_answers
    async def fit(self, request: web.Request) -> web.Response:
        return await self._fit(await _body(request, FitQuery))

    async def _fit(self, query: FitQuery) -> web.Response:
        client = self._client(query.node)
        return json_response(await client.fit(_as_agent(FitRequest, query)))

    @_answers
    async def download(self, request: web.Request) -> web.Response:
        query = await _body(request, DownloadQuery)
        info = await self._client(query.node).download(_as_agent(DownloadRequest, query))
        return json_response(await self._track(query.node, info, query), 202)

    @_answers
    async def ollama_models(self, request: web.Request) -> web.Response:
        client = self._client(request.query.get("node") or "local")
        return json_response(await client.ollama_models(request.query.get("store") or None))

    @_answers
    async def lmstudio_models(self, request: web.Request) -> web.Response:
        return json_response(await self._client(request.query.get("node") or "local").lmstudio_models())

    @_answers
    async def import_ollama(self, request: web.Request) -> web.Response:
        query = await _body(request, OllamaImportQuery)
        info = await self._client(query.node).import_ollama(_as_agent(OllamaImportRequest, query))
        return json_response(await self._track(query.node, info, query), 202)

    @_answers
    async def import_folder(self, request: web.Request) -> web.Response:
        query = await _body(request, FolderImportQuery)
        info = await self._client(query.node).import_folder(_as_agent(FolderImportRequest, query))
        return json_response(await self._track(query.node, info, query), 202)

    async def list_transfers(self, request: web.Request) -> web.Response:
        return json_response(sorted(self.transfers.values(), key=lambda t: t.created_at))

    def _find(self, request: web.Request) -> Transfer:
        found = self.transfers.get(request.match_info["id"])
        if found is None:
            raise DaemonProblem(404, "transfer_not_found", f"no transfer '{request.match_info['id']}'")
        return found

    @_answers
    async def get_transfer(self, request: web.Request) -> web.Response:
        return json_response(self._find(request))

    @_answers
    async def cancel(self, request: web.Request) -> web.Response:
        transfer = self._find(request)
        if transfer.state not in FINISHED_TRANSFERS:
            info = await self._client(transfer.node).cancel_transfer(transfer.agent_id)
            await self._update(transfer.id, info)
        await self.d.history.audit("admin", "transfer.cancel", transfer.id)
        return json_response(self.transfers[transfer.id])

    # --- following the agents' transfers -------------------------------------------------------
    async def _track(self, node: str, info: TransferInfo, query: Any) -> Transfer:
        transfer_id = f"x{next(self._ids)}"
        transfer = Transfer(**{**info.model_dump(), "id": transfer_id}, node=node, agent_id=info.id)
        self.transfers[transfer_id] = transfer
        self._queries[transfer_id] = query
        self.d.events.publish("transfer.state", None, **transfer.model_dump(mode="json"))
        await self.d.history.audit("admin", f"transfer.{info.kind}", transfer_id, info.label)
        if node not in self._watching:
            self._watching.add(node)
            self.d.spawn(self._watch(node))  # cancelled with the daemon's other tasks
        return transfer

    async def _watch(self, node: str) -> None:
        """Long-poll the node's transfers while any of ours there is unfinished."""
        version: int | None = None
        backoff = 0.5
        try:
            while any(t.node == node and t.state not in FINISHED_TRANSFERS for t in self.transfers.values()):
                link = self.d.orchestrator.links.get(node)
                try:
                    if link is None:
                        raise AgentError(0, "node_unknown", f"node '{node}' is gone")
                    page = await link.client.transfers(since=-1 if version is None else version, timeout=POLL_S)
                    backoff = 0.5
                except AgentError as exc:
                    _LOGGER.debug("following transfers on %s: %s", node, exc.message)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                version = page.version
                seen = {t.id: t for t in page.transfers}
                for transfer in list(self.transfers.values()):
                    if transfer.node != node or transfer.state in FINISHED_TRANSFERS:
                        continue
                    info = seen.get(transfer.agent_id)
                    if info is None:  # the agent restarted and forgot it
                        info = TransferInfo(**{**transfer.model_dump(), "id": transfer.agent_id,
                                               "state": TransferState.FAILED,
                                               "error": "the node lost this transfer (its agent restarted)"})
                    await self._update(transfer.id, info)
        finally:
            self._watching.discard(node)

    async def _update(self, transfer_id: str, info: TransferInfo) -> None:
        old = self.transfers[transfer_id]
        new = old.model_copy(update={k: v for k, v in info.model_dump().items() if k != "id"})
        new.result = list(info.result)
        if new.model_dump() == old.model_dump():
            return
        self.transfers[transfer_id] = new
        if new.state == TransferState.DONE and old.state != TransferState.DONE:
            query = self._queries.pop(transfer_id, None)
            if query is not None and query.register_models:
                new.registered, new.register_error = await register_models(self.d, new, query)
        if new.state != old.state:
            self.d.events.publish("transfer.state", None, **new.model_dump(mode="json"))
        else:
            self.d.events.publish("transfer.progress", None, id=new.id, node=new.node, state=new.state.value,
                                  stage=new.stage, bytes_done=new.bytes_done, bytes_total=new.bytes_total)
