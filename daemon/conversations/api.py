"""The handlers of ``/api/conversations`` (routes in ``daemon.routes``, contracts in ``daemon.api.conversations``).

An unknown id is 404 ``conversation_not_found``; a body past the limits (a message over
``MAX_CONTENT`` characters, too many messages, a title over ``MAX_TITLE``) is 422 ``invalid_request``
naming the field; an export format other than md or json is 400 ``invalid_parameter``.
"""

from __future__ import annotations

import logging

from aiohttp import web

from daemon.api.conversations import (
    EXPORT_FORMATS,
    MAX_BODY_BYTES,
    Conversation,
    ConversationAppend,
    ConversationCreate,
    ConversationRename,
    export_text,
)
from daemon.conversations.store import ConversationStore
from daemon.errors import DaemonProblem, json_response, read_body

_LOGGER = logging.getLogger(__name__)


def _not_found(conversation_id: str) -> DaemonProblem:
    return DaemonProblem(404, "conversation_not_found", f"No saved conversation '{conversation_id}' "
                         "(`mirbadllm ctl chats list` shows them).")


class ConversationsApi:
    def __init__(self, store: ConversationStore) -> None:
        self._store = store

    async def _require(self, request: web.Request) -> Conversation:
        conversation_id = request.match_info["id"]
        found = await self._store.get(conversation_id)
        if found is None:
            raise _not_found(conversation_id)
        return found

    async def list_conversations(self, request: web.Request) -> web.Response:
        return json_response(await self._store.summaries())

    async def create(self, request: web.Request) -> web.Response:
        new = await read_body(request, ConversationCreate, MAX_BODY_BYTES, empty={})
        return json_response(await self._store.create(new), status=201)

    async def get(self, request: web.Request) -> web.Response:
        return json_response(await self._require(request))

    async def rename(self, request: web.Request) -> web.Response:
        change = await read_body(request, ConversationRename, MAX_BODY_BYTES)
        renamed = await self._store.rename(request.match_info["id"], change.title)
        if renamed is None:
            raise _not_found(request.match_info["id"])
        return json_response(renamed)

    async def append(self, request: web.Request) -> web.Response:
        change = await read_body(request, ConversationAppend, MAX_BODY_BYTES)
        changed = await self._store.append(request.match_info["id"], change)
        if changed is None:
            raise _not_found(request.match_info["id"])
        return json_response(changed)

    async def delete(self, request: web.Request) -> web.Response:
        if not await self._store.delete(request.match_info["id"]):
            raise _not_found(request.match_info["id"])
        return web.Response(status=204)

    async def export(self, request: web.Request) -> web.Response:
        fmt = request.query.get("format", "md")
        if fmt not in EXPORT_FORMATS:
            raise DaemonProblem(400, "invalid_parameter", "format must be md or json")
        conversation = await self._require(request)
        text = export_text(conversation, "md" if fmt == "md" else "json")
        content_type = "text/markdown" if fmt == "md" else "application/json"
        return web.Response(text=text, content_type=content_type, charset="utf-8")
