"""Handlers of the agent rollout (admin token required; the routes are in ``daemon.routes``).

    GET  /api/nodes/upgrade   -> RolloutView     # state idle until the first rollout
    POST /api/nodes/upgrade   -> RolloutView     # body: UpgradeRequest (optional); 202, 409 upgrade_running
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel

from daemon.api.upgrades import UpgradeRequest
from daemon.errors import json_response, read_body
from daemon.upgrades.manager import UpgradeManager

MAX_BODY = 16 * 1024


class Rollouts(Protocol):
    """A rollout manager: ``UpgradeManager``, ``daemon.runtimes.manager.RuntimeUpgradeManager``."""

    def view(self) -> BaseModel: ...
    async def start(self, request: Any) -> BaseModel: ...


class RolloutApi:
    """The two handlers of a rollout (this module's, and ``daemon.runtimes.api``'s): its view, and
    starting one from an optional body (202)."""

    def __init__(self, rollouts: Rollouts, request_model: type[BaseModel]) -> None:
        self._rollouts = rollouts
        self._request_model = request_model

    async def status(self, request: web.Request) -> web.Response:
        return json_response(self._rollouts.view())

    async def start(self, request: web.Request) -> web.Response:
        body = await read_body(request, self._request_model, MAX_BODY, empty={})
        return json_response(await self._rollouts.start(body), status=202)


class UpgradesApi(RolloutApi):
    def __init__(self, upgrades: UpgradeManager) -> None:
        super().__init__(upgrades, UpgradeRequest)
