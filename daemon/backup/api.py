"""Handlers of ``/api/backups``: create, list, download, preview a restore, apply it (routes in ``daemon.routes``).

A passphrase arrives in a request body only, as a ``SecretStr``: never logged, echoed or stored.
"""

from __future__ import annotations

import logging

from aiohttp import web

from daemon.api.backup import (
    MAX_BACKUP_BYTES,
    BackupCreate,
    BackupListing,
    RestoreRequest,
)
from daemon.backup.service import BackupService
from daemon.errors import json_response, read_body

_LOGGER = logging.getLogger(__name__)


def _secret(value: object) -> str | None:
    get = getattr(value, "get_secret_value", None)
    return get() if get is not None else None


class BackupApi:
    def __init__(self, service: BackupService) -> None:
        self._service = service

    async def create(self, request: web.Request) -> web.Response:
        """``POST /api/backups``: the document itself, or with ``save`` the file written (201)."""
        body = await read_body(request, BackupCreate, 64 * 1024, "invalid_backup_request", empty={})
        passphrase = _secret(body.passphrase)
        if body.save:
            return json_response(await self._service.save(passphrase), status=201)
        data = await self._service.answered(passphrase)
        return web.Response(body=data, content_type="application/json")

    async def list_backups(self, request: web.Request) -> web.Response:
        settings = self._service.owners.config.backup
        return json_response(BackupListing(directory=str(self._service.directory), enabled=settings.enabled,
                                           keep=settings.keep, files=self._service.files(),
                                           last_error=self._service.last_error))

    async def download(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        return web.Response(body=self._service.read(name), content_type="application/json",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})

    async def _restore_body(self, request: web.Request) -> RestoreRequest:
        return await read_body(request, RestoreRequest, MAX_BACKUP_BYTES + 64 * 1024, "invalid_restore_request")

    async def preview(self, request: web.Request) -> web.Response:
        body = await self._restore_body(request)
        return json_response(await self._service.preview(body.document, _secret(body.passphrase), body.replace_ca))

    async def restore(self, request: web.Request) -> web.Response:
        body = await self._restore_body(request)
        return json_response(await self._service.restore(body.document, _secret(body.passphrase), body.replace_ca,
                                                         body.downloads))
