"""``NodeDisk``: a node's models folder as the daemon sees it, and the removals it allows.

The node's agent lists the folder and removes one file at a time (``agent.api.files``: never
outside the folder, through a link, a folder, or a file a running instance reads). The daemon adds
what the agent cannot know: which registered models use each file (``daemon.api.files``), so a
file a model still uses is never removed, whoever asks. A failed call to the agent is answered as
``daemon.nodes.agent_errors`` says.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.api.client import AgentError
from agent.api.files import FileRemoved, NodeFiles
from daemon.api.files import (
    KeptFile,
    ModelRemoval,
    NodeFilesView,
    file_views,
    removal_plan,
    uses_of,
)
from daemon.api.models import AUTO_NODE, ModelDefinition
from daemon.errors import DaemonProblem
from daemon.nodes.agent_errors import agent_problem
from daemon.nodes.links import Links
from daemon.validation import UnknownNode, resolve_node

_LOGGER = logging.getLogger(__name__)


class NodeDisk:
    """``definitions``: every registered model (the registry's); ``names``: every node, id -> name."""

    def __init__(self, links: Links, definitions: Callable[[], list[ModelDefinition]],
                 names: Callable[[], dict[str, str]]) -> None:
        self._links = links
        self._definitions = definitions
        self._names = names

    def node_id(self, wanted: str) -> str:
        """The id of the node ``wanted`` names (its id, ``local``, or its name); 404 ``node_unknown``."""
        try:
            node = resolve_node(wanted, self._names())
        except UnknownNode as exc:
            raise DaemonProblem(404, "node_unknown", str(exc)) from exc
        if node == AUTO_NODE:
            raise DaemonProblem(404, "node_unknown", "'auto' is no node; name one")
        return node

    async def listing(self, node: str) -> NodeFiles:
        """What the node's agent lists (404 unknown node, 503 offline, else the agent's answer)."""
        return await self._links.online_client(node).files()

    def view(self, node: str, listing: NodeFiles) -> NodeFilesView:
        return NodeFilesView(node=node, node_name=self._names().get(node, node), models_dir=listing.models_dir,
                             files=file_views(node, listing, self._definitions()), disk_total=listing.disk_total,
                             disk_free=listing.disk_free)

    async def remove_unused(self, node: str, path: str) -> FileRemoved:
        """Remove a file no registered model uses (409 ``file_in_use`` naming them otherwise)."""
        used_by = uses_of(path, node, self._definitions())
        if used_by:
            names = ", ".join(f"{u.model} ({u.role})" for u in used_by)
            raise DaemonProblem(409, "file_in_use", f"{path[:300]} is used by {names}; remove those models first, "
                                "or remove a model with its files")
        return await self._links.online_client(node).remove_file(path)

    async def remove_files_of(self, definition: ModelDefinition, node: str, listing: NodeFiles) -> ModelRemoval:
        """Delete the files of ``definition`` (already removed from the registry) that lie in the node's
        models folder (``listing``, taken before) and that no other model uses; say why each other was kept."""
        others = [d for d in self._definitions() if d.id != definition.id]
        delete, kept = removal_plan(definition, node, listing, others)
        answer = ModelRemoval(model=definition.id, node=node, node_name=self._names().get(node, node), kept=kept)
        for path in delete:
            try:
                answer.deleted.append(await self._links.online_client(node).remove_file(path))
            except AgentError as exc:  # in use by an instance the registry does not know, say
                problem = agent_problem(exc)
                answer.kept.append(KeptFile(path=path, reason="refused", message=f"{problem.code}: {problem.message}"))
            except DaemonProblem as problem:  # the node went offline meanwhile
                answer.kept.append(KeptFile(path=path, reason="refused", message=problem.message))
        answer.freed = sum(f.freed for f in answer.deleted)
        _LOGGER.info("model %s removed with its files on %s: %d deleted (%d bytes freed), %d kept", definition.id,
                     node, len(answer.deleted), answer.freed, len(answer.kept))
        return answer
