"""The admin API for getting models: will it fit, downloads, imports, and the transfers they start.

The node's agent does the file work; these handlers pick the node's link and forward the request;
the transfers a request starts are followed by ``daemon.sources.transfers``. Routes (admin token
required; the table is ``daemon.routes``):

    GET  /api/fit                       -> FitReport   # ?node=ID&path=P | &hf_repo=R&hf_file=F&revision=V; &ctx_size=N&parallel=N&n_gpu_layers=N
    POST /api/fit                       -> FitReport   # body: FitQuery
    POST /api/plan                      -> Plan        # body: PlanQuery; every node's ways to run it (daemon.sources.plan)
    POST /api/downloads                 -> Transfer    # body: DownloadQuery; 202
    GET  /api/imports/ollama            -> list[OllamaModelInfo]  # ?node=ID&store=PATH
    POST /api/imports/ollama            -> Transfer    # body: OllamaImportQuery; 202
    POST /api/imports/folder            -> Transfer    # body: FolderImportQuery; 202
    GET  /api/imports/lmstudio          -> list[LmStudioModel]  # ?node=ID&folder=PATH; GGUFs in LM Studio's folders
    POST /api/imports/lmstudio          -> Transfer    # body: LmStudioImportQuery; 202; registered where they lie
    GET  /api/transfers                 -> list[Transfer]  # running, paused and the newest finished ones
    GET  /api/transfers/{id}            -> Transfer
    POST /api/transfers/{id}/cancel     -> Transfer
    POST /api/transfers/{id}/pause      -> Transfer    # a download; 409 transfer_refused (daemon.sources.downloads)
    POST /api/transfers/{id}/resume     -> Transfer    # a paused one, from its partial file
    POST /api/transfers/{id}/retry      -> Transfer    # a failed or cancelled download
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agent.api.backends import BackendChoice
from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import (
    DownloadRequest,
    FitRequest,
    FolderImportRequest,
    HfFileRef,
    LmStudioImportRequest,
    OllamaImportRequest,
    TransferInfo,
)
from daemon.api.plan import NodePlanError, PlanQuery
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    FolderImportQuery,
    LmStudioImportQuery,
    LmStudioModel,
    OllamaImportQuery,
)
from daemon.errors import (
    DaemonProblem,
    M,
    json_response,
    read_body,
)
from daemon.history import History
from daemon.models.registry import Registry
from daemon.nodes.links import Links
from daemon.sources.downloads import Downloads
from daemon.sources.mirror import Mirror
from daemon.sources.plan import agent_request, fan_out
from daemon.sources.quants import quant_of
from daemon.sources.registration import model_using
from daemon.sources.transfers import Transfers

MAX_BODY = 256 * 1024


async def _body(request: web.Request, model: type[M]) -> M:
    return await read_body(request, model, MAX_BODY, empty=None)


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
    def __init__(self, links: Links, transfers: Transfers, history: History, mirror: Mirror | None = None,
                 backend_of: Callable[[str], BackendChoice] = lambda _node: "auto",
                 registry: Registry | None = None, names: Callable[[], Mapping[str, str]] = dict) -> None:
        self._links = links
        self._names = names  # node id -> name: what a plan's fleet options say
        self._registry = registry  # says which LM Studio file a model already runs
        self._backend_of = backend_of  # each node's backend choice: a fit or plan counts that backend's devices
        self._transfers = transfers
        self._history = history
        self._downloads = Downloads(links, transfers, history, mirror)

    async def fit_get(self, request: web.Request) -> web.Response:
        try:
            query = fit_query_from(request.query)
        except (ValueError, ValidationError) as exc:
            raise DaemonProblem(422, "invalid_request", f"bad query: {exc}") from exc
        return await self._fit(query)

    async def fit(self, request: web.Request) -> web.Response:
        return await self._fit(await _body(request, FitQuery))

    async def _fit(self, query: FitQuery) -> web.Response:
        client = self._links.online_client(query.node)
        asked = _as_agent(FitRequest, query).model_copy(update={"backend": self._backend_of(query.node)})
        return json_response(await client.fit(asked))

    async def plan(self, request: web.Request) -> web.Response:
        """How the model runs on the node asked, or on every online node (the others listed as offline)."""
        query = await _body(request, PlanQuery)
        if (query.model_path is None) == (query.hf is None):
            raise DaemonProblem(422, "invalid_request", "give either model_path or hf")
        if query.node is not None:
            client = self._links.online_client(query.node)
            return json_response(await fan_out([(query.node, client)], agent_request(query),
                                               backend_of=self._backend_of, names=self._names()))
        links = list(self._links)
        offline = [NodePlanError(node=link.node_id, code="node_offline", message=f"offline: {link.last_error}")
                   for link in links if not link.online]
        online = [(link.node_id, link.client) for link in links if link.online]
        if not online:
            raise DaemonProblem(503, "node_offline", "no node is online to plan on")
        return json_response(await fan_out(online, agent_request(query), offline, self._backend_of, self._names()))

    async def download(self, request: web.Request) -> web.Response:
        query = await _body(request, DownloadQuery)
        asked = _as_agent(DownloadRequest, query)
        info = await self._links.online_client(query.node).download(asked)

        async def again() -> TransferInfo:  # a retry once the node forgot it (its agent restarted)
            return await self._links.online_client(query.node).download(asked)

        return json_response(await self._transfers.track(query.node, info, query, again=again), 202)

    async def ollama_models(self, request: web.Request) -> web.Response:
        client = self._links.online_client(request.query.get("node") or "local")
        return json_response(await client.ollama_models(request.query.get("store") or None))

    async def lmstudio_models(self, request: web.Request) -> web.Response:
        """LM Studio's GGUFs on the node (the agent's listing), each with its quant and the model already
        running it."""
        node = request.query.get("node") or "local"
        listed = await self._links.online_client(node).lmstudio_models(request.query.get("folder") or None)
        return json_response([LmStudioModel(
            **info.model_dump(), quant=quant_of(info.model),
            registered_as=model_using(self._registry, node, info.path) if self._registry else None)
            for info in listed])

    async def import_lmstudio(self, request: web.Request) -> web.Response:
        query = await _body(request, LmStudioImportQuery)
        info = await self._links.online_client(query.node).import_lmstudio(_as_agent(LmStudioImportRequest, query))
        return json_response(await self._transfers.track(query.node, info, query), 202)

    async def import_ollama(self, request: web.Request) -> web.Response:
        query = await _body(request, OllamaImportQuery)
        info = await self._links.online_client(query.node).import_ollama(_as_agent(OllamaImportRequest, query))
        return json_response(await self._transfers.track(query.node, info, query), 202)

    async def import_folder(self, request: web.Request) -> web.Response:
        query = await _body(request, FolderImportQuery)
        info = await self._links.online_client(query.node).import_folder(_as_agent(FolderImportRequest, query))
        return json_response(await self._transfers.track(query.node, info, query), 202)

    async def list_transfers(self, request: web.Request) -> web.Response:
        return json_response(self._transfers.all())

    async def get_transfer(self, request: web.Request) -> web.Response:
        return json_response(self._downloads.find(request.match_info["id"]))

    async def cancel(self, request: web.Request) -> web.Response:
        return json_response(await self._downloads.cancel(request.match_info["id"]))

    async def pause(self, request: web.Request) -> web.Response:
        return json_response(await self._downloads.pause(request.match_info["id"]))

    async def resume(self, request: web.Request) -> web.Response:
        return json_response(await self._downloads.resume(request.match_info["id"]))

    async def retry(self, request: web.Request) -> web.Response:
        return json_response(await self._downloads.retry(request.match_info["id"]))
