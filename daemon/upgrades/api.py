"""Handlers of the agent rollout (admin token required; the routes are in ``daemon.routes``).

    GET  /api/nodes/upgrade   -> RolloutView     # state idle until the first rollout
    POST /api/nodes/upgrade   -> RolloutView     # body: UpgradeRequest (optional); 202, 409 upgrade_running
"""

from __future__ import annotations

from aiohttp import web

from daemon.api.upgrades import UpgradeRequest
from daemon.errors import json_response, read_json, validated
from daemon.upgrades.manager import UpgradeManager

MAX_BODY = 16 * 1024


class UpgradesApi:
    def __init__(self, upgrades: UpgradeManager) -> None:
        self._upgrades = upgrades

    async def status(self, request: web.Request) -> web.Response:
        return json_response(self._upgrades.view())

    async def start(self, request: web.Request) -> web.Response:
        body = validated(UpgradeRequest, await read_json(request, MAX_BODY, empty={}))
        return json_response(await self._upgrades.start(body), status=202)
