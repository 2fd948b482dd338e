"""The in-memory nodes, model sources and jobs behind ``DemoDaemon`` (which the app's tests run too).

Mixins over ``DemoDaemon``: they use its ``definitions`` (id -> ``ModelDefinition``), ``_view(model_id)``,
``_publish(type_, model=None, **data)`` and ``_record(name, *args)`` (first thing in every call); the
nodes are set up by ``_seed_nodes``, transfers and jobs on first use. Each answers like the daemon would, with believable figures: a fit report for any
file, transfers that finish, pairing with a code, benchmark and tuning jobs with results.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from daemon.api.client import DaemonError
from daemon.api.contracts import (
    Backend,
    BackendSetting,
    BackendState,
    Device,
    FitReport,
    GgufSummary,
    GpuInfo,
    ImportedModel,
    MemoryEstimate,
    OllamaModelInfo,
    TransferState,
    VllmSettings,
    normalize_code,
    profile,
    settings_type,
    settings_update,
    short_fingerprint,
)
from daemon.api.jobs import (
    BenchmarkRequest,
    JobState,
    JobView,
    PlanStep,
    ScorePoint,
    TuneRequest,
    TuningPlan,
    TuningResult,
)
from daemon.api.models import (
    HistoryRange,
    HistorySeries,
    ModelDefinition,
    ModelView,
)
from daemon.api.nodes import (
    DiscoveredNode,
    NodeAddResult,
    NodeState,
    NodeView,
    RuntimeOffer,
    node_pick,
    refusal,
)
from daemon.api.runtime_upgrades import NodeRuntimeBuild, RuntimeRolloutView
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    FolderImportQuery,
    OllamaImportQuery,
    Transfer,
)
from daemon.api.upgrades import (
    NodeUpgradeState,
    NodeUpgradeView,
    RolloutState,
)

_LOGGER = logging.getLogger(__name__)

GIB = 2**30
BASE_MODEL_MARKERS = ("-base", "gemma-3-270m.", "gemma-3-270m-q")


class DemoSources:
    """``fit``, downloads, imports and transfers; transfers finish at once and register nothing."""

    definitions: dict[str, ModelDefinition]
    base_model_files: set[str]  # model paths whose GGUF has no chat template, besides the base-model names

    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def _transfer_book(self) -> dict[str, Transfer]:
        book: dict[str, Transfer] | None = self.__dict__.get("_demo_transfers")
        if book is None:
            book = self.__dict__["_demo_transfers"] = {}
        return book

    def _file_has_chat_template(self, path: str) -> bool | None:
        name = path.rsplit("/", 1)[-1].lower()
        return path not in self.base_model_files and not any(marker in name for marker in BASE_MODEL_MARKERS)

    async def fit(self, query: FitQuery) -> FitReport:
        self._record("fit", query)
        path = query.model_path or (query.hf.file if query.hf and query.hf.file else "") or ""
        name = path.rsplit("/", 1)[-1]
        ctx = query.settings.ctx_size or 8192
        parallel = query.settings.parallel or 4
        kv = ctx * 28 * 2 * 1024 * 2
        summary = GgufSummary(architecture="llama", name=name.removesuffix(".gguf"), file_size=int(4.4 * GIB),
                              tensor_bytes=int(4.3 * GIB), tensor_count=291, block_count=28, context_length=131072,
                              embedding_length=3584, head_count=28, head_count_kv=[4] * 28, vocab_size=152064,
                              has_chat_template=self._file_has_chat_template(path))
        estimate = MemoryEstimate(ctx_size=ctx, parallel=parallel, n_gpu_layers=query.settings.n_gpu_layers or 0,
                                  weights_bytes=summary.tensor_bytes, kv_cache_bytes=kv, compute_bytes=GIB // 3,
                                  overhead_bytes=GIB // 8, host_bytes=summary.tensor_bytes + kv + GIB // 2,
                                  total_bytes=summary.tensor_bytes + kv + GIB // 2)
        fits = estimate.total_bytes < 34 * GIB
        return FitReport(summary=summary, estimate=estimate, memory_total=64 * GIB, memory_available=36 * GIB,
                         reserve_bytes=GIB, fits=fits, max_ctx_size=65536, max_gpu_layers=28, source=path,
                         message="fits in memory with room to spare" if fits else "needs more memory than is free")

    def _transfer(self, kind: str, label: str, node: str, files: list[str]) -> Transfer:
        now = time.time()
        transfer = Transfer(id=f"t{len(self._transfer_book) + 1}", kind=kind, label=label,  # type: ignore[arg-type]
                            node=node, state=TransferState.DONE, stage="done", bytes_done=int(4.4 * GIB),
                            bytes_total=int(4.4 * GIB), files=files, created_at=now, finished_at=now,
                            result=[ImportedModel(model_path=f, name=f.rsplit("/", 1)[-1].removesuffix(".gguf"))
                                    for f in files])
        self._transfer_book[transfer.id] = transfer
        self._publish("transfer.state", transfer=transfer.model_dump(mode="json"))
        return transfer

    async def download(self, query: DownloadQuery) -> Transfer:
        self._record("download", query)
        label = f"{query.hf.repo}/{query.hf.file or query.hf.quant or ''}" if query.hf else (query.url or "download")
        return self._transfer("hf" if query.hf else "url", label, query.node, [f"~/models/{label.rsplit('/', 1)[-1] or 'model'}.gguf"])

    async def ollama_models(self, node: str = "local", store: str | None = None) -> list[OllamaModelInfo]:
        self._record("ollama_models", node, store)
        return [OllamaModelInfo(model="llama3.2:3b", size=int(2.0 * GIB)),
                OllamaModelInfo(model="qwen3:8b", size=int(5.2 * GIB)),
                OllamaModelInfo(model="gemma3:4b", size=int(3.3 * GIB), has_projector=True)]

    async def import_ollama(self, query: OllamaImportQuery) -> Transfer:
        self._record("import_ollama", query)
        return self._transfer("ollama", query.model, query.node, [f"~/models/{query.model.replace(':', '-')}.gguf"])

    async def import_folder(self, query: FolderImportQuery) -> Transfer:
        self._record("import_folder", query)
        return self._transfer("folder", query.folder, query.node, [f"{query.folder.rstrip('/')}/model.gguf"])

    async def transfers(self) -> list[Transfer]:
        self._record("transfers")
        return list(self._transfer_book.values())

    async def transfer(self, transfer_id: str) -> Transfer:
        self._record("transfer", transfer_id)
        return self._find_transfer(transfer_id)

    async def cancel_transfer(self, transfer_id: str) -> Transfer:
        self._record("cancel_transfer", transfer_id)
        return self._find_transfer(transfer_id)  # already finished: nothing to cancel

    def _find_transfer(self, transfer_id: str) -> Transfer:
        if transfer_id not in self._transfer_book:
            raise DaemonError(404, "transfer_not_found", f"no transfer '{transfer_id}'")
        return self._transfer_book[transfer_id]


LLAMACPP_BUILD = RuntimeOffer(runtime="llamacpp", available=True, version="11434.0.0 (runtime.json)",
                              digest="3b1f" + "0" * 60, location="~/.local/share/mirbadllm/runtimes/llamacpp-11434.0.0/"
                              "bin/llama-server",
                              backends=[BackendState(backend=Backend.CPU, available=True, verified=True)])
RTX_4090 = Device(name="CUDA0", description="NVIDIA GeForce RTX 4090", memory_total_mib=24564, memory_free_mib=9000)
NO_DOCKER = RuntimeOffer(runtime="vllm", available=False,
                         reason="no Docker engine answers on this node (start Docker, or install it)")
NOT_APPLE = RuntimeOffer(runtime="mlx", available=False, reason="MLX runs on Apple Silicon (macOS on arm64) only")


def _bare_local_node() -> NodeView:
    return NodeView(id="local", name="workstation", local=True, state=NodeState.ONLINE,
                    memory_total=32 * GIB, memory_available=20 * GIB, runtimes=[LLAMACPP_BUILD, NO_DOCKER, NOT_APPLE])


class DemoNodes:
    """Paired nodes (``nodes``), agents waiting to be paired (``discovered``, each with the code it "prints").

    This machine only; ``add_waiting_agent`` lets an agent appear.
    """

    nodes: list[NodeView]
    discovered: list[DiscoveredNode]

    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    def _seed_nodes(self) -> None:
        self.nodes = [_bare_local_node()]
        self.discovered = []
        self._offers: dict[str, tuple[str, NodeView]] = {}  # fingerprint -> (its code, the node once paired)

    def _offer(self, entry: DiscoveredNode, code: str, paired: NodeView) -> None:
        self.discovered.append(entry)
        self._offers[entry.fingerprint] = (code, paired)

    def add_waiting_agent(self, name: str, code: str, address: str = "10.20.0.2:9443") -> DiscoveredNode:
        """An agent on the LAN that waits to be paired and "prints" ``code``."""
        fp = hashlib.sha256(name.encode()).hexdigest()
        host, port = address.rsplit(":", 1)
        entry = DiscoveredNode(name=name, address=address, host=host, port=int(port), fingerprint=fp,
                               short_fingerprint=short_fingerprint(fp), source="mdns")
        self._offer(entry, code, NodeView(id="", name="", memory_total=64 * GIB, memory_available=48 * GIB,
                                          gpus=[GpuInfo(index=0, name="RTX 6000", uuid="GPU-remote-0",
                                                        memory_total=48 * GIB, memory_used=8 * GIB,
                                                        utilization_percent=12.0, temperature_c=48.0,
                                                        power_w=95.0)]))
        self._publish("node.discovered", name=name)
        return entry

    def _node(self, node_id: str) -> NodeView:
        found = [n for n in self.nodes if n.id == node_id]
        if not found:
            raise DaemonError(404, "node_not_found", f"no paired node with id '{node_id}'")
        return found[0]

    async def list_nodes(self) -> list[NodeView]:
        self._record("list_nodes")
        return list(self.nodes)

    async def get_node(self, node_id: str) -> NodeView:
        self._record("get_node", node_id)
        return self._node(node_id)

    async def discovered_nodes(self) -> list[DiscoveredNode]:
        self._record("discovered_nodes")
        return list(self.discovered)

    async def add_node_address(self, address: str) -> NodeAddResult:
        self._record("add_node_address", address)
        found = [d for d in self.discovered if d.address == address or d.host == address]
        if not found:
            raise DaemonError(502, "node_unreachable", f"No MirbadLLM agent answers at {address}")
        return NodeAddResult(discovered=found[0])

    async def pair_node(self, address: str, code: str, fingerprint: str) -> NodeView:
        self._record("pair_node", address, fingerprint)  # never the code, like the daemon
        entry = next((d for d in self.discovered if d.fingerprint == fingerprint), None)
        if entry is None:
            raise DaemonError(502, "node_unreachable", f"No agent waiting to be paired answers at {address}")
        wanted, paired = self._offers[fingerprint]
        if normalize_code(code) != normalize_code(wanted):
            raise DaemonError(403, "wrong_code", "Wrong pairing code (4 tries left).")
        self.discovered.remove(entry)
        node = paired.model_copy(update={"id": hashlib.sha256(fingerprint.encode()).hexdigest(), "name": entry.name,
                                         "address": address, "state": NodeState.ONLINE, "fingerprint": fingerprint,
                                         "paired_at": time.time()})
        self.nodes.append(node)
        self._publish("node.paired", node=node.id)
        return node

    async def remove_node(self, node_id: str) -> None:
        self._record("remove_node", node_id)
        node = self._node(node_id)
        if node.local:
            raise DaemonError(400, "node_is_local", "this machine's own node cannot be removed")
        self.nodes.remove(node)
        self._publish("node.removed", node=node_id)

    async def set_node_backend(self, node_id: str, backend: str) -> NodeView:
        self._record("set_node_backend", node_id, backend)
        node = self._node(node_id)
        try:
            choice = BackendSetting.model_validate({"backend": backend}).backend
        except ValidationError as exc:  # 422 as the daemon words it
            raise DaemonError(422, "invalid_backend", f"backend: {exc.errors()[0]['msg']}") from None
        refused = refusal(node_id, choice, node.runtimes)
        if refused is not None:
            raise DaemonError(*refused)
        pick = node_pick(choice, node.runtimes)
        updated = node.model_copy(update={"backend_choice": choice, "backend": pick.backend if pick else None,
                                          "backend_why": pick.why if pick else None})
        self.nodes[self.nodes.index(node)] = updated
        self._publish("node.backend", node=node_id)
        return updated

    async def runtime_upgrade_status(self) -> RuntimeRolloutView:
        self._record("runtime_upgrade_status")
        return getattr(self, "_demo_runtime_rollout", RuntimeRolloutView())

    async def start_runtime_upgrade(self, folder: str | None = None,
                                    smoke_model: str | None = None) -> RuntimeRolloutView:
        """The demo's llama.cpp rollout finishes at once: every paired node runs the demo's new build."""
        self._record("start_runtime_upgrade", folder, smoke_model)
        targets = [n for n in self.nodes if not n.local]
        if not targets:
            raise DaemonError(409, "no_nodes", "No paired node to roll a llama.cpp build out to: pair a node first.")
        now, version = time.time(), "11500.0.0"
        build = f"llamacpp-{version}-demo"

        def was(node: NodeView) -> str:
            offer = next((o for o in node.runtimes if profile(o.runtime).gpu_backends), None)
            return f"llama.cpp {offer.version}" if offer is not None and offer.version else ""

        nodes = [NodeUpgradeView(node=n.id, name=n.name, from_version=was(n), state=NodeUpgradeState.DONE,
                                 started_at=now, finished_at=now) for n in targets]
        wanted = {n.id: NodeRuntimeBuild(build=build, version=version, digest="5c2e" + "0" * 60, since=now)
                  for n in targets}
        self._demo_runtime_rollout = RuntimeRolloutView(state=RolloutState.DONE, version=version, build=build,
                                                        started_at=now, finished_at=now, nodes=nodes, wanted=wanted)
        self._publish("runtime_upgrade.finished", build=build, state="done", reason=None)
        return self._demo_runtime_rollout

    async def gpu_history(self, node_id: str, gpu: str, range_: HistoryRange = "5m") -> HistorySeries:
        self._record("gpu_history", node_id, gpu, range_)
        self._node(node_id)
        step = {"5m": 1.0, "1h": 10.0, "24h": 240.0, "7d": 1680.0}[range_]
        return HistorySeries(subject=f"{node_id}/{gpu}", range=range_, step_s=step, points=[])


class DemoJobs:
    """Benchmarks and tuning: one job at a time, which stays running until cancelled."""

    definitions: dict[str, ModelDefinition]

    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _view(self, model_id: str) -> ModelView: ...
        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def _job_book(self) -> dict[str, JobView]:
        book: dict[str, JobView] | None = self.__dict__.get("_demo_jobs")
        if book is None:
            book = self.__dict__["_demo_jobs"] = {}
        return book

    def _add(self, view: JobView) -> JobView:
        self._job_book[view.id] = view
        return view

    def _new(self, kind: str, model: str, **extra: Any) -> JobView:
        self._view(model)
        if any(j.state not in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
               for j in self._job_book.values()):
            raise DaemonError(409, "job_conflict", "another job is running on this node; wait for it or cancel it")
        view = self._add(JobView(id=f"{kind}.{model}.{int(time.time() * 1000)}", kind=kind,  # type: ignore[arg-type]
                                 model=model, state=JobState.RUNNING, started_at=time.time(), progress=0.35,
                                 phase="measuring", message="candidate 3 of 8: parallel=8",
                                 candidate="parallel=8 (total context kept)", candidates_done=2, candidates_total=8,
                                 eta_s=412.0, scores=[ScorePoint(label="baseline", score=1.0),
                                                      ScorePoint(label="threads=12", score=1.07)], **extra))
        self._publish("job.started", model, job=view.model_dump(mode="json"))
        return view

    async def start_benchmark(self, request: BenchmarkRequest) -> JobView:
        self._record("start_benchmark", request)
        return self._new("benchmark", request.model, preset=request.preset)

    async def start_tune(self, request: TuneRequest) -> JobView:
        self._record("start_tune", request)
        return self._new("tune", request.model, preset=request.preset, search=request.search)

    async def plan_tune(self, request: TuneRequest) -> TuningPlan:
        self._record("plan_tune", request)
        self._view(request.model)
        steps = [PlanStep(dimension="threads", values=["8", "12", "16"], goal="Match the performance cores.",
                          tradeoff="Too many threads contend with each other."),
                 PlanStep(dimension="batch", values=["512/512", "2048/512", "4096/1024"],
                          goal="Faster prompt processing.", tradeoff="Larger batches take more compute memory."),
                 PlanStep(dimension="parallel", values=["2", "4", "8"], goal="More requests at once.",
                          tradeoff="Each slot gets a smaller share of the context."),
                 PlanStep(dimension="flash_attn", values=["off", "on"], goal="Less memory, faster long prompts.",
                          tradeoff="Not every backend supports it.")]
        full = request.search == "full"
        return TuningPlan(model=request.model, preset=request.preset, search=request.search, steps=steps,
                          candidates=14 if full else 8, confirmations=3, start_s=6.0, benchmark_s=48.0,
                          eta_s=1150.0 if full else 690.0,
                          notes=["The model answers 503 maintenance while it is tuned.",
                                 "Your saved settings are restored at the end, whatever happens."])

    async def list_jobs(self, model: str | None = None, kind: str | None = None) -> list[JobView]:
        self._record("list_jobs", model, kind)
        views = [v.model_copy(update={"result": None}) for v in self._job_book.values()
                 if (model is None or v.model == model) and (kind is None or v.kind == kind)]
        return sorted(views, key=lambda v: v.started_at, reverse=True)

    async def get_job(self, job_id: str) -> JobView:
        self._record("get_job", job_id)
        return self._job(job_id)

    def _job(self, job_id: str) -> JobView:
        if job_id not in self._job_book:
            raise DaemonError(404, "job_not_found", f"no job '{job_id}'")
        return self._job_book[job_id]

    async def cancel_job(self, job_id: str) -> JobView:
        self._record("cancel_job", job_id)
        view = self._job(job_id).model_copy(update={"state": JobState.CANCELLED,
                                                               "finished_at": time.time()})
        self._job_book[job_id] = view
        self._publish("job.finished", view.model, job=view.model_dump(mode="json"))
        return view

    async def apply_job(self, job_id: str, restart: bool = False) -> ModelView:
        self._record("apply_job", job_id, restart)
        result = self._job(job_id).result
        vllm = isinstance(result, TuningResult) and issubclass(settings_type(result.runtime), VllmSettings)
        winner = (result.winner_vllm if vllm else result.winner_settings) if isinstance(result, TuningResult) else None
        if not isinstance(result, TuningResult) or winner is None:
            raise DaemonError(409, "no_winner", "this run has no winner to apply")
        view = self._view(result.model)
        self.definitions[result.model] = view.definition.model_copy(update=settings_update(winner))
        self._publish("model.updated", result.model)
        return self._view(result.model)
