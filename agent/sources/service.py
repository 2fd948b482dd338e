"""``ModelSources``: the agent's side of getting models — will it fit, downloads, imports.

One object per agent, built by ``agent.deps`` and used by the routes in ``agent.sources.api``.
Each request is checked completely before a transfer starts, so a bad name is a 422 with nothing
created; the transfer itself reports its progress through ``TransferManager``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from aiohttp.abc import AbstractResolver

from agent.admission import Admission
from agent.api.models import InstanceState
from agent.api.plan import NodePlan
from agent.api.sources import (
    DownloadRequest,
    FitReport,
    FitRequest,
    FolderImportRequest,
    GgufSummary,
    LmStudioImportRequest,
    LmStudioModelInfo,
    OllamaImportRequest,
    OllamaModelInfo,
    TransferInfo,
)
from agent.placement import plan_node, split_figures
from agent.problems import InvalidModelFile
from agent.sources.downloads import (
    DownloadContext,
    check_download,
    hf_files,
    run_hf,
    run_url,
)
from agent.sources.huggingface import (
    BadSourceRequest,
    check_ref,
    file_info,
    hub_endpoint,
    hub_settings,
    hub_token,
    remote_summary,
)
from agent.sources.imports import (
    check_folder,
    check_lmstudio,
    check_ollama,
    list_lmstudio,
    list_models,
    lmstudio_roots,
    run_folder,
    run_lmstudio,
    run_ollama,
)
from agent.sources.store import ModelStore
from agent.sources.transfers import TransferManager
from core.safe_names import UnsafeName, check_node_path

Loading = Callable[[], list[tuple[str, InstanceState, int | None]]]


class ModelSources:
    def __init__(self, models_dir: Path, admission: Admission, loading: Loading, *,
                 allow_private: bool = False, resolver: AbstractResolver | None = None) -> None:
        self.store = ModelStore(models_dir)
        self.admission = admission
        self.transfers = TransferManager()
        self.context = DownloadContext(self.store, allow_private, resolver)
        self._loading = loading
        self.lmstudio_folders: list[Path] | None = None  # None: LM Studio's own folders in the home

    async def fit(self, req: FitRequest) -> FitReport:
        """The estimate for a local file or a Hugging Face file (only its header is read)."""
        summary, source = await self._summary(req)
        return await self.admission.report(summary, req.settings, source=source, loading=self._starting(),
                                           rpc_devices=req.rpc_devices, backend=req.backend)

    async def plan(self, req: FitRequest) -> NodePlan:
        """Every way the model runs on this node (``agent.placement``), best first."""
        summary, source = await self._summary(req)
        memory = await self.admission.snapshot(self._starting(), req.backend)
        return NodePlan(source=source, summary=summary, unified_memory=memory.unified,
                        memory_total=memory.memory_total, memory_available=memory.memory_available,
                        options=plan_node(summary, req.settings, memory),
                        split=split_figures(summary, req.settings))

    def _starting(self) -> list[tuple[str, int | None]]:
        return [(i, pid) for i, state, pid in self._loading() if state is InstanceState.STARTING]

    async def _summary(self, req: FitRequest) -> tuple[GgufSummary, str]:
        if (req.model_path is None) == (req.hf is None):
            raise BadSourceRequest("give either model_path or hf")
        if req.model_path is not None:
            try:
                check_node_path(req.model_path)
            except UnsafeName as exc:
                raise BadSourceRequest(str(exc)) from exc
            summary = await self.admission.inspector.summary(req.model_path)
            source = req.model_path
        else:
            summary, source = await self._hf_summary(req)
        if summary.is_projector:
            raise InvalidModelFile("this file is a vision projector, not a model")
        return summary, source

    async def _hf_summary(self, req: FitRequest) -> tuple[GgufSummary, str]:
        ref = req.hf
        assert ref is not None
        check_ref(ref)
        hub = hub_endpoint()
        token = req.token or await asyncio.to_thread(hub_token)
        files, _projector = await hf_files(ref, False, token, hub)
        infos = [await file_info(ref.repo, path, ref.revision, token, hub) for path in files]
        settings = await hub_settings(hub, token, self.context.allow_private)
        settings.resolver = self.context.resolver
        return await remote_summary(infos, settings), f"hf:{ref.repo}/{files[0]}"

    def download(self, req: DownloadRequest) -> TransferInfo:
        label = check_download(req, self.context)
        if req.hf is not None:
            return self.transfers.start("hf", label, lambda handle: run_hf(req, handle, self.context), pausable=True)
        return self.transfers.start("url", label, lambda handle: run_url(req, handle, self.context), pausable=True)

    def import_ollama(self, req: OllamaImportRequest) -> TransferInfo:
        label = check_ollama(req, self.store)
        return self.transfers.start("ollama", label, lambda handle: run_ollama(req, handle, self.store))

    def import_folder(self, req: FolderImportRequest) -> TransferInfo:
        label = check_folder(req)
        return self.transfers.start("folder", label, lambda handle: run_folder(req, handle))

    async def ollama_models(self, store: str | None) -> list[OllamaModelInfo]:
        if store is not None:
            try:
                check_node_path(store, "store")
            except UnsafeName as exc:
                raise BadSourceRequest(str(exc)) from exc
        return await asyncio.to_thread(list_models, Path(store) if store else None)

    async def lmstudio_models(self, folder: str | None = None) -> list[LmStudioModelInfo]:
        """The GGUF models in LM Studio's folders, and in ``folder`` (one of the same layout)."""
        return await asyncio.to_thread(list_lmstudio, lmstudio_roots(self.lmstudio_folders, folder))

    async def import_lmstudio(self, req: LmStudioImportRequest) -> TransferInfo:
        """Register listed LM Studio files where they lie (a folder import of chosen files)."""
        roots = lmstudio_roots(self.lmstudio_folders, req.folder)
        label, picked = await asyncio.to_thread(check_lmstudio, req, roots)
        return self.transfers.start("folder", label, lambda handle: run_lmstudio(picked, handle))

    async def close(self) -> None:
        await self.transfers.close()
