"""Handlers of the llama.cpp build rollout (admin token required; the routes are in ``daemon.routes``).

    GET  /api/nodes/runtime-upgrade   -> RuntimeRolloutView   # state idle until the first rollout
    POST /api/nodes/runtime-upgrade   -> RuntimeRolloutView   # body: RuntimeUpgradeRequest (optional); 202,
                                                              # 409 runtime_upgrade_running, 422 runtime_build_refused
"""

from __future__ import annotations

from aiohttp import web

from daemon.api.runtime_upgrades import RuntimeUpgradeRequest
from daemon.errors import json_response, read_json, validated
from daemon.runtimes.manager import RuntimeUpgradeManager

MAX_BODY = 16 * 1024


class RuntimeUpgradesApi:
    def __init__(self, runtime_upgrades: RuntimeUpgradeManager) -> None:
        self._runtime_upgrades = runtime_upgrades

    async def status(self, request: web.Request) -> web.Response:
        return json_response(self._runtime_upgrades.view())

    async def start(self, request: web.Request) -> web.Response:
        body = validated(RuntimeUpgradeRequest, await read_json(request, MAX_BODY, empty={}))
        return json_response(await self._runtime_upgrades.start(body), status=202)
