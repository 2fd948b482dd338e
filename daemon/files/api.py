"""Handlers of a node's model files in the admin API (admin token required; the routes are in ``daemon.routes``).

    GET    /api/nodes/{id}/files   -> NodeFilesView   # id: the node's id, 'local' or its name
    DELETE /api/nodes/{id}/files   -> FileRemoved     # ?path=P; a file no model uses, in the models folder

Removing a model with its files is ``DELETE /api/models/{id}?files=1`` (``daemon.models.api``), which
hands the files to the same ``NodeDisk``. Every removal is in the audit log (``file.remove``).
"""

from __future__ import annotations

from aiohttp import web

from daemon.errors import DaemonProblem, json_response
from daemon.files.disk import NodeDisk
from daemon.history import History


class NodeFilesApi:
    def __init__(self, disk: NodeDisk, history: History) -> None:
        self._disk = disk
        self._history = history

    async def node_files(self, request: web.Request) -> web.Response:
        """The node's model files, each with the models that use it, and its disk's free and total bytes."""
        node = self._disk.node_id(request.match_info["id"])
        return json_response(self._disk.view(node, await self._disk.listing(node)))

    async def remove_file(self, request: web.Request) -> web.Response:
        """Remove one file no model uses from the node's models folder (409 ``file_in_use`` if one does)."""
        node = self._disk.node_id(request.match_info["id"])
        path = request.query.get("path", "")
        if not path:
            raise DaemonProblem(400, "bad_request", "say which file: ?path=P (an absolute path on the node)")
        removed = await self._disk.remove_unused(node, path)
        await self._history.audit("admin", "file.remove", f"{node}/{removed.path}"[:500],
                                  f"{removed.size} bytes, {removed.freed} freed")
        return json_response(removed)
