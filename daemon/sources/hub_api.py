"""The admin API of Discover: search the Hugging Face hub, list a repository's GGUF files by quant,
and serve the curated catalog. The routes are in ``daemon.routes``, the hub calls in ``daemon.sources.hub``:

    GET  /api/hub/search                   -> HubSearchResult  # ?q=TEXT&format=gguf|mlx|safetensors&limit=N
    GET  /api/hub/repos/{owner}/{name}/files -> HubRepoFiles    # 404 no_gguf_files | repo_not_found, 403 repo_gated
    GET  /api/hub/catalog                  -> CatalogView       # each entry with whether it fits this machine

Nothing here registers or downloads anything: a download is ``POST /api/downloads`` with the file
these name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from daemon.api.catalog import catalog_view
from daemon.api.hub import HUB_FORMATS, MAX_SEARCH_LIMIT, HubFormat
from daemon.api.models import HostSnapshot
from daemon.errors import DaemonProblem, json_response, query_int
from daemon.sources.hub import Hub

_LOGGER = logging.getLogger(__name__)

MAX_QUERY = 200


def _format(value: str) -> HubFormat:
    for known in HUB_FORMATS:
        if value == known:
            return known
    raise DaemonProblem(400, "invalid_parameter", f"format must be one of {', '.join(HUB_FORMATS)}")


class HubApi:
    def __init__(self, hub: Hub, hosts: Callable[[], list[HostSnapshot]]) -> None:
        self._hub = hub
        self._hosts = hosts  # the nodes' latest host figures (daemon.telemetry): the catalog's fit

    async def search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        if not query or len(query) > MAX_QUERY:
            raise DaemonProblem(400, "invalid_parameter", f"q: give 1 to {MAX_QUERY} characters to search for "
                                "(an empty search shows the catalog: /api/hub/catalog)")
        limit = query_int(request, "limit", 20)
        if not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise DaemonProblem(400, "invalid_parameter", f"limit must be 1 to {MAX_SEARCH_LIMIT}")
        return json_response(await self._hub.search(query, _format(request.query.get("format", "gguf")), limit))

    async def repo_files(self, request: web.Request) -> web.Response:
        repo = f"{request.match_info['owner']}/{request.match_info['name']}"
        return json_response(await self._hub.repo_files(repo))

    async def catalog(self, request: web.Request) -> web.Response:
        return json_response(catalog_view(self._hosts()))
