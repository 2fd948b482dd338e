"""``FakeSourcesClient``: the fake daemon with model sources the test controls (fit, downloads, imports).

``fit_report``, ``ollama`` and ``lmstudio`` are what ``fit``, ``ollama_models`` and ``lmstudio_models``
answer. A download or import answers with a queued transfer (in the demo daemon's own book); the
test moves it along with ``advance(...)``, which publishes ``transfer.progress`` / ``transfer.state``
events exactly as the daemon does, and registers the model when the transfer is done (on the
transfer's node, with the query's llama.cpp ``settings`` and ``rpc_nodes`` when it names them, as
``daemon.sources.registration`` does; with the demo's definition when the query asks for
``preset="demo"``).
"""

from __future__ import annotations

import logging
from typing import Any

from fake_daemon import FakeDaemonClient, definition

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import (
    FitReport,
    GgufSummary,
    LmStudioModelInfo,
    MemoryEstimate,
    OllamaModelInfo,
    TransferState,
)
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    LmStudioModel,
    OllamaImportQuery,
    Transfer,
)

_LOGGER = logging.getLogger(__name__)

GiB = 1 << 30


def report(fits: bool = True, ctx: int = 4096) -> FitReport:
    summary = GgufSummary(architecture="llama", file_size=2 * GiB, tensor_bytes=2 * GiB, tensor_count=200,
                          block_count=28, context_length=131072)
    estimate = MemoryEstimate(ctx_size=ctx, parallel=4, weights_bytes=2 * GiB, kv_cache_bytes=GiB // 2,
                              compute_bytes=GiB // 8, overhead_bytes=GiB // 32, host_bytes=3 * GiB,
                              total_bytes=3 * GiB)
    return FitReport(summary=summary, estimate=estimate, memory_total=32 * GiB, memory_available=20 * GiB,
                     reserve_bytes=GiB, fits=fits, max_ctx_size=65536)


class FakeSourcesClient(FakeDaemonClient):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fit_report = report()
        self.ollama = [OllamaModelInfo(model="llama3.2:3b", size=2 * GiB), OllamaModelInfo(model="qwen3:4b")]
        self.lmstudio: list[LmStudioModelInfo] = []
        self.queries: dict[str, Any] = {}  # transfer id -> the query that started it

    async def fit(self, query: FitQuery) -> FitReport:
        self._record("fit", query)
        settings: LlamaCppSettings = query.settings
        return self.fit_report.model_copy(update={"estimate": self.fit_report.estimate.model_copy(
            update={"ctx_size": settings.ctx_size or self.fit_report.estimate.ctx_size})})

    async def ollama_models(self, node: str = "local", store: str | None = None) -> list[OllamaModelInfo]:
        self._record("ollama_models", node, store)
        return list(self.ollama)

    async def lmstudio_models(self, node: str = "local", folder: str | None = None) -> list[LmStudioModel]:
        self._record("lmstudio_models", node)
        return [LmStudioModel.model_validate(m.model_dump()) for m in self.lmstudio]

    def _queue(self, kind: str, label: str, query: Any) -> Transfer:
        transfer = Transfer(id=f"x{len(self._transfer_book) + 1}", kind=kind, label=label,  # type: ignore[arg-type]
                            node=query.node)
        self._transfer_book[transfer.id], self.queries[transfer.id] = transfer, query
        self.publish("transfer.state", None, **transfer.model_dump(mode="json"))
        return transfer

    async def download(self, query: DownloadQuery) -> Transfer:
        self._record("download", query)
        return self._queue("hf", f"{query.hf.repo if query.hf else query.url}", query)

    async def import_ollama(self, query: OllamaImportQuery) -> Transfer:
        self._record("import_ollama", query)
        return self._queue("ollama", f"Ollama {query.model}", query)

    async def cancel_transfer(self, transfer_id: str) -> Transfer:
        self._record("cancel_transfer", transfer_id)
        return self.advance(transfer_id, state=TransferState.CANCELLED, stage="cancelled")

    def advance(self, transfer_id: str, **changes: Any) -> Transfer:
        """Move a transfer on and publish the event the daemon would."""
        old = self._transfer_book[transfer_id]
        new = old.model_copy(update=changes)
        if new.state == TransferState.DONE and old.state != TransferState.DONE:
            query = self.queries[transfer_id]
            model_id = query.model_id or "downloaded"
            placed = {k: v for k, v in (("settings", getattr(query, "settings", None)),
                                        ("rpc_nodes", list(getattr(query, "rpc_nodes", [])))) if v not in (None, [])}
            self.definitions[model_id] = definition(model_id, node=new.node, **placed)  # as the daemon registers it
            if getattr(query, "preset", None) == "demo":
                from daemon.api.demo_model import demo_definition

                path = new.result[0].model_path if new.result else f"/models/{model_id}.gguf"
                self.definitions[model_id] = demo_definition(path, node=new.node, model_id=model_id)
            from daemon.api.models import ModelState, ModelStatus

            self.statuses[model_id] = ModelStatus(id=model_id, served_name=model_id, state=ModelState.STOPPED)
            new.registered = [model_id]
            self.publish("model.added", model_id)
        self._transfer_book[transfer_id] = new
        if new.state != old.state:
            self.publish("transfer.state", None, **new.model_dump(mode="json"))
        else:
            self.publish("transfer.progress", None, id=new.id, node=new.node, state=new.state.value,
                         stage=new.stage, bytes_done=new.bytes_done, bytes_total=new.bytes_total)
        return new
