"""Handlers of model updates from the hub: list, check now, update, roll back (``daemon.sources.updates``).

The routes are in ``daemon.routes``:

    GET  /api/model-updates           -> list[ModelUpdate]  # the last check's answer for each hub model
    POST /api/model-updates/check     -> list[ModelUpdate]  # ask the hub now
    POST /api/models/{id}/update      -> Transfer (202)     # 409 no_hub_origin | update_refused | no_update
    POST /api/models/{id}/rollback    -> ModelView          # 409 no_hub_origin | nothing_to_roll_back
"""

from __future__ import annotations

import logging

from aiohttp import web

from daemon.api.models import ModelView
from daemon.errors import json_response
from daemon.models.orchestrator import Orchestrator
from daemon.sources.updates import ModelUpdates

_LOGGER = logging.getLogger(__name__)


class ModelUpdatesApi:
    def __init__(self, updates: ModelUpdates, orchestrator: Orchestrator) -> None:
        self._updates = updates
        self._orchestrator = orchestrator  # the rolled back model's status

    async def list_updates(self, request: web.Request) -> web.Response:
        return json_response(self._updates.all())

    async def check(self, request: web.Request) -> web.Response:
        return json_response(await self._updates.check_all())

    async def update(self, request: web.Request) -> web.Response:
        return json_response(await self._updates.update(request.match_info["id"]), 202)

    async def rollback(self, request: web.Request) -> web.Response:
        definition = await self._updates.rollback(request.match_info["id"])
        status = self._orchestrator.named(self._orchestrator.status(definition))
        return json_response(ModelView(definition=definition, status=status))
