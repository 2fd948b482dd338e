"""Model updates from the Hugging Face hub: is there a newer revision, fetch it beside the old files,
and roll back.

A model pulled from the hub records its origin when it is registered (``ModelSource``: repository,
commit, each file's SHA-256 and size, ``daemon.sources.registration``). ``ModelUpdates.check`` asks
the hub (``Hub.files_at``, from the daemon's machine) for the repository's newest commit and its
files: a newer commit that changes the model's files is an update (``available``); the same commit
with a file whose SHA-256 or size differs from what was recorded is a hub answer that cannot be
trusted (``refused``: nothing is done, and an update is refused with that reason). ``run`` checks
every hub model once a day, the API on demand (``daemon.sources.updates_api``).

``update`` asks the model's node to download the newest commit's files into a folder of their own
(``{owner}--{name}--{commit[:12]}``: the old files stay where they are), and once that transfer is
done ``_swap`` compares what the agent fetched and verified against the hub's listing, points the
model at the new files, keeps the old ones in ``ModelSource.previous`` and restarts the model if it
was running. ``rollback`` points it back at the kept files (restarting it too); there is one kept
revision, so a second roll back has nothing to return to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.api.sources import DownloadRequest, HfFileRef, SourceFile
from daemon.api.model_updates import ModelUpdate
from daemon.api.models import (
    AUTO_NODE,
    KeptRevision,
    ModelDefinition,
    ModelSource,
    ModelState,
)
from daemon.api.sources import Transfer
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.history import History
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry
from daemon.nodes.links import Links
from daemon.sources.hub import Hub
from daemon.sources.registration import Registered
from daemon.sources.transfers import Transfers

_LOGGER = logging.getLogger(__name__)

CHECK_EVERY_S = 24 * 3600.0
FIRST_CHECK_S = 600.0  # after a start, once the nodes have connected
_RUNNING = (ModelState.READY, ModelState.STARTING)


@dataclass(frozen=True)
class UpdateQuery:
    """What ``_swap`` checks the finished download against (a transfer's query)."""

    model_id: str
    revision: str
    files: tuple[SourceFile, ...]
    register_models: bool = True


def hub_source(definition: ModelDefinition) -> ModelSource | None:
    source = definition.sources
    return source if source is not None and source.hf_repo and source.hf_file else None


def projector_of(definition: ModelDefinition) -> str | None:
    args = definition.extra_args
    return next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--mmproj"), None)


def with_projector(args: list[str], projector: str | None) -> list[str]:
    """``args`` with ``--mmproj`` pointing at ``projector`` (dropped when None)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--mmproj" and i + 1 < len(args):
            skip = True
            continue
        out.append(arg)
    return ["--mmproj", projector, *out] if projector else out


def differences(recorded: list[SourceFile], listed: dict[str, SourceFile]) -> list[str]:
    """How the hub's files differ from those recorded, one line per file ([] when they are the same)."""
    lines = []
    for old in recorded:
        new = listed.get(old.path)
        if new is None:
            lines.append(f"{old.path} is gone")
        elif old.sha256 and new.sha256 != old.sha256:
            lines.append(f"{old.path} sha256 {old.sha256[:12]}… -> {(new.sha256 or 'none')[:12]}…")
        elif new.size != old.size:
            lines.append(f"{old.path} size {old.size} -> {new.size} bytes")
    return lines


class ModelUpdates:
    def __init__(self, registry: Registry, orchestrator: Orchestrator, links: Links, transfers: Transfers,
                 events: EventBus, history: History, hub: Hub, clock: Callable[[], float] = time.time) -> None:
        self._registry = registry
        self._orchestrator = orchestrator
        self._links = links
        self._transfers = transfers
        self._events = events
        self._history = history
        self._hub = hub
        self._clock = clock
        self._found: dict[str, ModelUpdate] = {}  # the last check's answer per model

    def view(self, definition: ModelDefinition) -> ModelUpdate:
        source = hub_source(definition)
        assert source is not None
        found = self._found.get(definition.id)
        if found is not None and (found.hf_repo, found.revision) != (source.hf_repo, source.revision):
            found = None  # the model changed since (an update, a roll back, an edit): ask again
        base = found or ModelUpdate(model=definition.id, hf_repo=source.hf_repo or "")
        kept = source.previous
        return base.model_copy(update={"hf_file": source.hf_file, "revision": source.revision,
                                       "can_roll_back": kept is not None,
                                       "previous_revision": kept.revision if kept else None})

    def all(self) -> list[ModelUpdate]:
        return [self.view(d) for d in sorted(self._registry.all(), key=lambda d: d.id) if hub_source(d)]

    def _require(self, model_id: str) -> tuple[ModelDefinition, ModelSource]:
        definition = self._registry.require(model_id)
        source = hub_source(definition)
        if source is None:
            raise DaemonProblem(409, "no_hub_origin", f"model '{model_id}' was not pulled from the Hugging Face "
                                "hub (it records no repository and file), so there is nothing to update it from")
        return definition, source

    async def check_all(self) -> list[ModelUpdate]:
        for definition in list(self._registry.all()):
            if hub_source(definition) is None:
                continue
            try:
                await self.check(definition.id)
            except DaemonProblem as exc:  # the hub down, the repo gone: said per model, the others go on
                self._found[definition.id] = self.view(definition).model_copy(update={
                    "state": "failed", "reason": exc.message, "checked_at": self._clock()})
        return self.all()

    async def check(self, model_id: str) -> ModelUpdate:
        """Ask the hub now; raises ``DaemonProblem`` when it cannot be asked."""
        definition, source = self._require(model_id)
        assert source.hf_repo and source.hf_file
        latest, listed = await self._hub.files_at(source.hf_repo, "main")
        recorded = source.files or [SourceFile(path=source.hf_file)]
        state, reason, files = "current", None, [listed[f.path] for f in recorded if f.path in listed]
        if latest == source.revision:
            changed = differences(source.files, listed)
            if changed:
                state, reason = "refused", (f"the hub changed {'; '.join(changed)} without a new revision "
                                            f"(still {latest[:12]}): refusing its answer; nothing was changed")
        elif len(files) < len(recorded):
            state, reason = "refused", (f"the hub's newest revision {latest[:12]} no longer holds "
                                        f"{', '.join(f.path for f in recorded if f.path not in listed)}: "
                                        "pull the model again by hand")
        elif source.files and not differences(source.files, listed):
            reason = f"revision {latest[:12]} leaves its files as they are"
        else:
            state, reason = "available", f"revision {latest[:12]} changes its files"
        before = self._found.get(model_id)
        found = self.view(definition).model_copy(update={"latest": latest, "state": state, "reason": reason,
                                                         "files": files, "checked_at": self._clock()})
        self._found[model_id] = found
        if state == "available" and (before is None or before.state != "available" or before.latest != latest):
            self._events.publish("model.update_available", model_id, revision=latest)
        elif state == "refused" and (before is None or before.state != "refused" or before.reason != reason):
            self._events.publish("model.update_refused", model_id, reason=reason)  # an open app shows why at once
        return found

    async def run(self, first_after_s: float = FIRST_CHECK_S, every_s: float = CHECK_EVERY_S) -> None:
        """Check every hub model once a day (a background task of the daemon)."""
        await asyncio.sleep(first_after_s)
        while True:
            found = await self.check_all()
            _LOGGER.info("model updates checked: %d of %d models have one", sum(f.state == "available"
                                                                                for f in found), len(found))
            await asyncio.sleep(every_s)

    async def update(self, model_id: str) -> Transfer:
        """Start fetching the newest revision onto the model's node; the swap happens when it is done."""
        definition, source = self._require(model_id)
        assert source.hf_repo
        found = await self.check(model_id)
        if found.state == "refused":
            raise DaemonProblem(409, "update_refused", f"model '{model_id}' is not updated: {found.reason}")
        if found.state != "available" or found.latest is None:
            raise DaemonProblem(409, "no_update", f"model '{model_id}' is at the hub's newest revision "
                                f"({(found.latest or '?')[:12]}): {found.reason or 'nothing to update'}")
        node = self._orchestrator.node_of(definition)
        if node is None or node == AUTO_NODE:
            raise DaemonProblem(409, "node_unknown", f"model '{model_id}' has not run on any node yet, so where "
                                "its files are is unknown; start it once, then update it")
        folder = f"{source.hf_repo.replace('/', '--')}--{found.latest[:12]}"
        request = DownloadRequest(hf=HfFileRef(repo=source.hf_repo, file=source.hf_file, revision=found.latest),
                                  target=folder, with_projector=projector_of(definition) is not None)
        info = await self._links.online_client(node).download(request)
        await self._history.audit("admin", "model.update.fetch", model_id, f"revision {found.latest}")
        query = UpdateQuery(model_id, found.latest, tuple(found.files))
        return await self._transfers.track(node, info, query, register=self._swap)

    async def _swap(self, transfer: Transfer, query: UpdateQuery) -> Registered:
        """Point the model at the files the transfer fetched, once they match the hub's listing."""
        definition = self._registry.get(query.model_id)
        source = hub_source(definition) if definition is not None else None
        if definition is None or source is None or not transfer.result:
            return Registered(error=f"model '{query.model_id}' was removed or fetched nothing; it is unchanged")
        fetched = transfer.result[0]
        expected = {f.path: f for f in query.files}
        wrong = differences(list(expected.values()), {f.path: f for f in fetched.files})
        if wrong or fetched.hf_file not in expected:
            return Registered(error=f"refused: the files fetched differ from the hub's listing of revision "
                              f"{query.revision[:12]} ({'; '.join(wrong) or fetched.hf_file}); "
                              f"'{query.model_id}' still runs revision {(source.revision or '?')[:12]}")
        kept = KeptRevision(revision=source.revision, hf_file=source.hf_file, files=source.files,
                            model_path=definition.model_path, projector_path=projector_of(definition),
                            replaced_at=self._clock())
        new_source = source.model_copy(update={"revision": fetched.revision or query.revision,
                                               "hf_file": fetched.hf_file, "files": fetched.files, "previous": kept})
        new = definition.model_copy(update={
            "model_path": fetched.model_path, "sources": new_source,
            "extra_args": with_projector(definition.extra_args, fetched.projector_path)})
        error = await self._save(definition, new, "model.update")
        self._known(new, "current", None, query.revision, fetched.files)
        return Registered(ids=[query.model_id], error=error)

    async def rollback(self, model_id: str) -> ModelDefinition:
        """Back to the kept files and revision (restarting the model if it ran)."""
        definition, source = self._require(model_id)
        kept = source.previous
        if kept is None:
            raise DaemonProblem(409, "nothing_to_roll_back", f"model '{model_id}' keeps no earlier files: it was "
                                "not updated since it was added, or it was rolled back already")
        new_source = source.model_copy(update={"revision": kept.revision, "hf_file": kept.hf_file,
                                               "files": kept.files, "previous": None})
        new = definition.model_copy(update={"model_path": kept.model_path, "sources": new_source,
                                            "extra_args": with_projector(definition.extra_args, kept.projector_path)})
        error = await self._save(definition, new, "model.rollback")
        newer = self._found.get(model_id)
        if newer is not None and newer.latest and newer.latest != kept.revision:  # what it was updated to
            self._known(new, "available", f"revision {newer.latest[:12]} changes its files (rolled back from it)",
                        newer.latest, newer.files)
        if error is not None:
            raise DaemonProblem(502, "restart_failed", f"model '{model_id}' is back on revision "
                                f"{(kept.revision or '?')[:12]}, but {error}")
        return self._registry.require(model_id)

    def _known(self, definition: ModelDefinition, state: str, reason: str | None, latest: str,
               files: list[SourceFile]) -> None:
        """What an update or a roll back tells of the hub without asking it again."""
        before = self._found.get(definition.id)
        self._found[definition.id] = self.view(definition).model_copy(update={
            "state": state, "reason": reason, "latest": latest, "files": files,
            "checked_at": before.checked_at if before else self._clock()})

    async def _save(self, before: ModelDefinition, after: ModelDefinition, action: str) -> str | None:
        """Store ``after``, and restart the model if it ran: what went wrong with the restart, if anything."""
        running = self._orchestrator.status(before).state in _RUNNING
        after = await self._registry.update(after)
        self._events.publish("model.updated", after.id)
        revision = after.sources.revision if after.sources else None
        await self._history.audit("admin", action, after.id, f"revision {revision}", before=before, after=after)
        self._orchestrator.forget_refusal(after.id)
        self._orchestrator.on_instances(after.node, {})
        if not running:
            return None
        try:
            await self._orchestrator.restart(after.id)
        except DaemonProblem as exc:
            _LOGGER.warning("%s: %s, then the restart failed: %s", after.id, action, exc.message)
            return f"the restart failed: {exc.message}"
        return None
