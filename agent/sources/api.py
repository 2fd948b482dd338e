"""The agent's routes for getting models, spliced into ``agent.server``'s route table.

    POST /fit                     -> FitReport        # body: FitRequest
    POST /downloads               -> TransferInfo     # body: DownloadRequest; 202
    GET  /imports/ollama          -> list[OllamaModelInfo]  # ?store=PATH
    POST /imports/ollama          -> TransferInfo     # body: OllamaImportRequest; 202
    POST /imports/folder          -> TransferInfo     # body: FolderImportRequest; 202
    GET  /imports/lmstudio        -> list[LmStudioModelInfo]  # ?folder=PATH; GGUFs in LM Studio's models folders
    POST /imports/lmstudio        -> TransferInfo     # body: LmStudioImportRequest; 202
    GET  /transfers               -> TransfersPage    # ?since=VERSION&timeout=S (long-poll)
    GET  /transfers/{id}          -> TransferInfo
    POST /transfers/{id}/cancel   -> TransferInfo
    POST /transfers/{id}/pause    -> TransferInfo     # a download: its partial files kept; 409 transfer_refused
    POST /transfers/{id}/resume   -> TransferInfo     # a paused, failed or cancelled download runs again
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agent.api.sources import (
    DownloadRequest,
    FitRequest,
    FolderImportRequest,
    LmStudioImportRequest,
    OllamaImportRequest,
)
from agent.problems import AgentProblem, validation_message
from agent.sources.service import ModelSources

MAX_BODY = 256 * 1024
MAX_LONG_POLL_S = 300.0
M = TypeVar("M", bound=BaseModel)
SourcesOf = Callable[[web.Request], ModelSources]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadBody(AgentProblem, status=422, code="invalid_request"):
    pass


async def _body(request: web.Request, model: type[M]) -> M:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise BadBody("the request body is too large", status=413, code="request_too_large")
    try:
        return model.model_validate(json.loads(await request.read() or b"null"))
    except ValidationError as exc:
        raise BadBody(f"not a valid {model.__name__}: {validation_message(exc)}") from exc
    except ValueError as exc:
        raise BadBody(f"the body is not JSON: {exc}") from exc


def _json(model: BaseModel | list[BaseModel], status: int = 200) -> web.Response:
    if isinstance(model, list):
        return web.json_response([m.model_dump(mode="json") for m in model], status=status)
    return web.json_response(model.model_dump(mode="json"), status=status)


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    try:
        return min(max(float(request.query.get(name) or default), low), high)
    except ValueError:
        raise BadBody(f"query parameter {name} must be a number", status=400, code="bad_request") from None


def routes(prefix: str, sources_of: SourcesOf) -> list[web.RouteDef]:
    """The route definitions under ``prefix`` (``/agent/v1``)."""

    async def fit(request: web.Request) -> web.Response:
        return _json(await sources_of(request).fit(await _body(request, FitRequest)))

    async def download(request: web.Request) -> web.Response:
        return _json(sources_of(request).download(await _body(request, DownloadRequest)), 202)

    async def ollama_models(request: web.Request) -> web.Response:
        return _json(list(await sources_of(request).ollama_models(request.query.get("store") or None)))

    async def lmstudio_models(request: web.Request) -> web.Response:
        return _json(list(await sources_of(request).lmstudio_models(request.query.get("folder") or None)))

    async def import_lmstudio(request: web.Request) -> web.Response:
        return _json(await sources_of(request).import_lmstudio(await _body(request, LmStudioImportRequest)), 202)

    async def import_ollama(request: web.Request) -> web.Response:
        return _json(sources_of(request).import_ollama(await _body(request, OllamaImportRequest)), 202)

    async def import_folder(request: web.Request) -> web.Response:
        return _json(sources_of(request).import_folder(await _body(request, FolderImportRequest)), 202)

    async def transfers(request: web.Request) -> web.Response:
        manager = sources_of(request).transfers
        if "since" not in request.query:
            return _json(manager.page())
        since = int(_number(request, "since", 0, -1, 2**62))
        return _json(await manager.wait_page(since, _number(request, "timeout", 0, 0, MAX_LONG_POLL_S)))

    async def transfer(request: web.Request) -> web.Response:
        return _json(sources_of(request).transfers.get(request.match_info["id"]))

    async def cancel(request: web.Request) -> web.Response:
        return _json(await sources_of(request).transfers.cancel(request.match_info["id"]))

    async def pause(request: web.Request) -> web.Response:
        return _json(await sources_of(request).transfers.pause(request.match_info["id"]))

    async def resume(request: web.Request) -> web.Response:
        return _json(sources_of(request).transfers.resume(request.match_info["id"]))

    p = prefix
    return [
        web.post(f"{p}/fit", fit),                                      # body: FitRequest
        web.post(f"{p}/downloads", download),                           # body: DownloadRequest
        web.get(f"{p}/imports/ollama", ollama_models),                  # ?store=PATH
        web.post(f"{p}/imports/ollama", import_ollama),                 # body: OllamaImportRequest
        web.post(f"{p}/imports/folder", import_folder),                 # body: FolderImportRequest
        web.get(f"{p}/imports/lmstudio", lmstudio_models),              # ?folder=PATH
        web.post(f"{p}/imports/lmstudio", import_lmstudio),             # body: LmStudioImportRequest
        web.get(f"{p}/transfers", transfers),                           # ?since=VERSION&timeout=S
        web.get(f"{p}/transfers/{{id}}", transfer),
        web.post(f"{p}/transfers/{{id}}/cancel", cancel),
        web.post(f"{p}/transfers/{{id}}/pause", pause),
        web.post(f"{p}/transfers/{{id}}/resume", resume),
    ]
