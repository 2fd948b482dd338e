"""The agent's routes of its models folder's files, spliced into ``agent.server``'s route table.

    GET    /files  -> NodeFiles     # every file under the models folder, the disk's total and free bytes
    DELETE /files  -> FileRemoved   # ?path=P, or body: FileRemoval; refusals: agent.api.files
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from pydantic import ValidationError

from agent.api.files import FILES_PATH, FileRemoval
from agent.files.folder import FileRefused, ModelFolder
from agent.problems import validation_message

MAX_BODY = 16 * 1024


async def _path(request: web.Request) -> str:
    """The file to remove: ``?path=`` or the body's ``path``."""
    if request.query.get("path"):
        return request.query["path"]
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise FileRefused("the request body is too large", status=413, code="request_too_large")
    raw = await request.read()
    if not raw:
        raise FileRefused("say which file: ?path=P or a body {\"path\": P}", status=400, code="bad_request")
    try:
        return FileRemoval.model_validate(json.loads(raw)).path
    except ValidationError as exc:
        raise FileRefused(f"not a valid FileRemoval: {validation_message(exc)}", status=422,
                          code="invalid_request") from exc
    except ValueError as exc:
        raise FileRefused(f"the body is not JSON: {exc}", status=422, code="invalid_request") from exc


def routes(prefix: str, folder: ModelFolder) -> list[web.RouteDef]:
    """The route definitions under ``prefix`` (``/agent/v1``)."""

    async def list_files(request: web.Request) -> web.Response:
        # A walk of a large folder on a slow disk: off the event loop.
        listing = await asyncio.get_running_loop().run_in_executor(None, folder.listing)
        return web.json_response(listing.model_dump(mode="json"))

    async def remove_file(request: web.Request) -> web.Response:
        # On the loop: the running instances are asked and the file unlinked with nothing in between.
        removed = folder.remove(await _path(request))
        return web.json_response(removed.model_dump(mode="json"))

    return [
        web.get(f"{prefix}{FILES_PATH}", list_files),
        web.delete(f"{prefix}{FILES_PATH}", remove_file),               # ?path=P | body: FileRemoval
    ]
