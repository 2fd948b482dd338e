"""The demo's model updates from the hub (``model_updates``, ``update_model_files``, ``rollback_model``),
mixed into ``memory_daemon.DemoDaemon``.

A hub in memory: ``hub_latest`` holds each repository's newest commit (a test calls
``publish_revision``); a model whose recorded revision is older has an update, and updating it
swaps its file for the new revision's (a folder of its own, as the daemon's ``daemon.sources.updates``
does) at once, keeping the old one for a roll back. ``hub_refused`` makes the hub's answer about a
model untrustworthy (a file changed without a new revision): listed as refused, and an update is
refused with that reason.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.contracts import ImportedModel, TransferState
from daemon.api.model_updates import ModelUpdate
from daemon.api.models import (
    KeptRevision,
    ModelDefinition,
    ModelSource,
    ModelState,
    ModelView,
)
from daemon.api.sources import Transfer

if TYPE_CHECKING:
    from daemon.api.models import Event, ModelStatus

_LOGGER = logging.getLogger(__name__)



def _commit(repo: str, n: int) -> str:
    return hashlib.sha1(f"{repo}@{n}".encode()).hexdigest()


def _source(definition: ModelDefinition) -> ModelSource | None:
    source = definition.sources
    return source if source is not None and source.hf_repo and source.hf_file else None


class DemoModelUpdates:
    if TYPE_CHECKING:
        definitions: dict[str, ModelDefinition]
        statuses: dict[str, ModelStatus]

        def _record(self, name: str, *args: object) -> None: ...
        def _view(self, model_id: str) -> ModelView: ...
        def _start(self, model_id: str, **kw: Any) -> ModelStatus: ...
        def publish(self, type_: str, model: str | None = None, **data: Any) -> Event: ...

    def _seed_model_updates(self) -> None:
        self.hub_latest: dict[str, str] = {}  # repo -> its newest commit
        self.hub_refused: dict[str, str] = {}  # model -> why the hub's answer is refused
        self.hub_commits: dict[str, int] = {}  # repo -> how many commits it has had
        self.updates_checked_at: float | None = None

    def publish_revision(self, repo: str) -> str:
        """A new commit of ``repo`` on the demo hub: its models have an update."""
        self.hub_commits[repo] = self.hub_commits.get(repo, 1) + 1
        self.hub_latest[repo] = _commit(repo, self.hub_commits[repo])
        return self.hub_latest[repo]

    def _model_update(self, definition: ModelDefinition, source: ModelSource) -> ModelUpdate:
        repo = source.hf_repo or ""
        latest = self.hub_latest.get(repo, source.revision)
        state, reason = "current", None
        if definition.id in self.hub_refused:
            state, reason = "refused", self.hub_refused[definition.id]
        elif latest != source.revision:
            state, reason = "available", f"revision {(latest or '')[:12]} changes its files"
        kept = source.previous
        return ModelUpdate(model=definition.id, hf_repo=repo, hf_file=source.hf_file, revision=source.revision,
                           latest=latest, state=state, reason=reason,  # type: ignore[arg-type]
                           files=source.files, checked_at=self.updates_checked_at, can_roll_back=kept is not None,
                           previous_revision=kept.revision if kept else None)

    def _hub_model(self, model_id: str) -> tuple[ModelDefinition, ModelSource]:
        definition = self._view(model_id).definition
        source = _source(definition)
        if source is None:
            raise DaemonError(409, "no_hub_origin", f"model '{model_id}' was not pulled from the Hugging Face "
                              "hub (it records no repository and file), so there is nothing to update it from")
        return definition, source

    async def model_updates(self, check: bool = False) -> list[ModelUpdate]:
        self._record("model_updates", check)
        if check:
            self.updates_checked_at = time.time()
        return [self._model_update(d, s) for d in sorted(self.definitions.values(), key=lambda d: d.id)
                if (s := _source(d)) is not None]

    def _swap(self, definition: ModelDefinition, new: ModelDefinition) -> None:
        self.definitions[new.id] = new
        self.publish("model.updated", new.id)
        if self.statuses[new.id].state in (ModelState.READY, ModelState.STARTING):
            self._start(new.id, restart_pending=False)

    async def update_model_files(self, model_id: str) -> Transfer:
        self._record("update_model_files", model_id)
        definition, source = self._hub_model(model_id)
        found = self._model_update(definition, source)
        if found.state == "refused":
            raise DaemonError(409, "update_refused", f"model '{model_id}' is not updated: {found.reason}")
        if found.state != "available" or not found.latest:
            raise DaemonError(409, "no_update", f"model '{model_id}' is at the hub's newest revision")
        folder, name = definition.model_path.rsplit("/", 1)
        repo = source.hf_repo or ""
        slug = repo.replace("/", "--")
        parent = folder.rsplit("/", 1)[0] if folder.rsplit("/", 1)[-1].startswith(slug) else folder
        path = f"{parent}/{slug}--{found.latest[:12]}/{name}"  # beside the old files, as the daemon puts them
        files = [f.model_copy(update={"sha256": hashlib.sha256(f"{repo}/{f.path}@{found.latest}".encode())
                                      .hexdigest()}) for f in source.files]
        kept = KeptRevision(revision=source.revision, hf_file=source.hf_file, files=source.files,
                            model_path=definition.model_path, replaced_at=time.time())
        self._swap(definition, definition.model_copy(update={"model_path": path, "sources": source.model_copy(
            update={"revision": found.latest, "files": files, "previous": kept})}))
        now = time.time()
        size = sum(f.size for f in files)
        transfer = Transfer(id=f"u{int(now * 1000)}", kind="hf", label=f"{repo} {name}", state=TransferState.DONE,
                            stage="done", bytes_done=size, bytes_total=size, files=[name], created_at=now,
                            finished_at=now, registered=[model_id],
                            result=[ImportedModel(name=model_id, model_path=path, hf_repo=repo, hf_file=name,
                                                  revision=found.latest, files=files)])
        self.publish("transfer.state", None, **transfer.model_dump(mode="json"))
        return transfer

    async def rollback_model(self, model_id: str) -> ModelView:
        self._record("rollback_model", model_id)
        definition, source = self._hub_model(model_id)
        kept = source.previous
        if kept is None:
            raise DaemonError(409, "nothing_to_roll_back", f"model '{model_id}' keeps no earlier files: it was "
                              "not updated since it was added, or it was rolled back already")
        self._swap(definition, definition.model_copy(update={"model_path": kept.model_path, "sources": source.model_copy(
            update={"revision": kept.revision, "hf_file": kept.hf_file, "files": kept.files, "previous": None})}))
        return self._view(model_id)
