"""The in-memory daemon's LM Studio import: the GGUFs of LM Studio's folders and their import.

Mixed into ``memory_daemon.DemoDaemon`` ahead of ``DemoSources``. ``lmstudio_models`` lists a believable
LM Studio folder (a model with its vision projector, two more), each with the model already running
it; ``import_lmstudio`` registers the files chosen where they lie, at once, and names the model that
already runs a file instead of adding it again, as the daemon does (``daemon.sources.registration``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.contracts import ImportedModel, TransferState
from daemon.api.models import ModelDefinition, ModelState, ModelStatus
from daemon.api.sources import LmStudioImportQuery, LmStudioModel, Transfer

_LOGGER = logging.getLogger(__name__)
GIB = 2**30
LMSTUDIO_HOME = "~/.lmstudio/models"
# (publisher/model/file, size in GiB, with a projector)
DEMO_LMSTUDIO = (("lmstudio-community/Qwen3-4B-Instruct-2507-GGUF/Qwen3-4B-Instruct-2507-Q4_K_M.gguf", 2.5, False),
                 ("lmstudio-community/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf", 3.2, True),
                 ("bartowski/Phi-4-mini-instruct-GGUF/Phi-4-mini-instruct-Q6_K.gguf", 3.1, False))


def _model_id(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].removesuffix(".gguf").lower()
    return "".join(c if c.isalnum() else "-" for c in stem).strip("-")[:36].strip("-") or "model"


class DemoLmStudio:
    if TYPE_CHECKING:  # provided by the daemon class this is mixed into (DemoSources, DemoDaemon)
        definitions: dict[str, ModelDefinition]
        statuses: dict[str, ModelStatus]

        @property
        def _transfer_book(self) -> dict[str, Transfer]: ...
        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    def _lmstudio_listing(self, node: str, folder: str | None) -> list[LmStudioModel]:
        roots = [LMSTUDIO_HOME] + ([folder.rstrip("/")] if folder else [])
        found = []
        for root in roots:
            for model, size, projector in DEMO_LMSTUDIO if root == LMSTUDIO_HOME else DEMO_LMSTUDIO[:1]:
                path = f"{root}/{model}"
                mmproj = f"{path.rsplit('/', 1)[0]}/mmproj-model-f16.gguf" if projector else None
                using = next((d.id for d in self.definitions.values() if d.node == node and d.model_path == path), None)
                found.append(LmStudioModel(model=model, path=path, size=int(size * GIB), projector_path=mmproj,
                                           quant=path.rsplit("-", 1)[-1].removesuffix(".gguf"), registered_as=using))
        return found

    async def lmstudio_models(self, node: str = "local", folder: str | None = None) -> list[LmStudioModel]:
        self._record("lmstudio_models", node, folder)
        return self._lmstudio_listing(node, folder)

    async def import_lmstudio(self, query: LmStudioImportQuery) -> Transfer:
        self._record("import_lmstudio", query)
        listed = {m.path: m for m in self._lmstudio_listing(query.node, query.folder)}
        unknown = [p for p in query.paths if p not in listed]
        if unknown:
            raise DaemonError(404, "not_found", f"{unknown[0]} is not a model in LM Studio's folders on this node")
        registered: list[str] = []
        existing: list[str] = []
        for path in dict.fromkeys(query.paths):
            info = listed[path]
            if info.registered_as is not None:
                existing.append(info.registered_as)
                continue
            base = _model_id(path)
            model_id, n = base, 2
            while model_id in self.definitions:
                model_id, n = f"{base}-{n}", n + 1
            self.definitions[model_id] = ModelDefinition(
                id=model_id, served_name=model_id, node=query.node, model_path=path, tags=list(query.tags),
                extra_args=["--mmproj", info.projector_path] if info.projector_path else [],
                description=f"Added from LM Studio: {info.model}")
            self.statuses[model_id] = ModelStatus(id=model_id, served_name=model_id, state=ModelState.STOPPED)
            self.publish("model.added", model_id)
            registered.append(model_id)
        now = time.time()
        picked = [listed[p] for p in dict.fromkeys(query.paths)]
        transfer = Transfer(id=f"t{len(self._transfer_book) + 1}", kind="folder", node=query.node,
                            label=f"LM Studio {picked[0].model}" + (f" and {len(picked) - 1} more" if len(picked) > 1
                                                                     else ""),
                            state=TransferState.DONE, stage="done", created_at=now, finished_at=now,
                            files=[m.path.rsplit("/", 1)[-1] for m in picked],
                            result=[ImportedModel(name=_model_id(m.path), model_path=m.path, size=m.size,
                                                  projector_path=m.projector_path) for m in picked],
                            registered=registered, existing=existing)
        self._transfer_book[transfer.id] = transfer
        self._publish("transfer.state", transfer=transfer.model_dump(mode="json"))
        return transfer
