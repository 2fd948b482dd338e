"""``DemoDaemon``: an in-memory daemon, a test fake of the app's tests only (the product's demo is
``mirbadllm/demo.py``: the real daemon).

It answers every call of ``DaemonClient`` (``tests/app/test_demo_conformance.py`` holds it to that)
like the daemon would: state changes publish events with monotonic ids and a ``boot_id``, so the
app's ``EventFeed`` runs for real. ``DemoDaemon(models)`` is a bare daemon holding just those models
(stopped), one machine without paired nodes, no keys, no jobs and no made-up figures, the state the
app's tests start from (their ``FakeDaemonClient`` adds only recorded calls and injected failures).
``DemoDaemon()`` is a seeded fleet (models in every state, a host with a GPU, keys, history, logs,
an access log (``memory_daemon.requests``); nodes, sources and jobs from ``memory_daemon.services``,
the hub from ``memory_daemon.hub``, saved chats from ``memory_daemon.conversations``) for the few
tests that need a full one; started models become ready after a short delay.

What a test may set directly: ``definitions``/``statuses``, ``keys``, ``settings``,
``hosts``, ``history`` (points per model), ``log_lines`` (with ``add_log_line``), ``base_model_files``
(GGUFs without a chat template), ``ready_after`` (seconds until a started model is ready; ``None``:
it stays starting), ``unreachable`` (every call fails like a stopped daemon); and ``set_state``,
``publish``, ``restart_daemon``, ``add_waiting_agent``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from daemon.api.client import DaemonError
from daemon.api.contracts import GpuInfo, KeysAtRest, LlamaCppSettings, VllmSettings
from daemon.api.mirror import MirrorQuery
from daemon.api.models import (
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyLimits,
    DaemonInfo,
    DaemonSettings,
    Event,
    EventsPage,
    HistoryPoint,
    HistoryRange,
    HistorySeries,
    HostSnapshot,
    ModelDefinition,
    ModelSource,
    ModelState,
    ModelStatus,
    ModelView,
    RouterStats,
    StatusResponse,
    TracingSettings,
)
from daemon.api.plan import DeviceUse, NodePlan, Plan, PlanOption, PlanQuery, PlanState
from daemon.api.rpc_split import RpcHelper
from daemon.api.sources import FitQuery, Transfer
from memory_daemon.audit import DemoAudit
from memory_daemon.backup import DemoBackups
from memory_daemon.ca_rotation import DemoCaRotation
from memory_daemon.conversations import DemoConversations
from memory_daemon.disk import DEMO_MODELS_DIR, DemoDisk
from memory_daemon.downloads import DemoDownloads
from memory_daemon.host_services import DemoHostServices
from memory_daemon.hub import DemoHub
from memory_daemon.lmstudio import DemoLmStudio
from memory_daemon.model_updates import DemoModelUpdates
from memory_daemon.releases import DemoReleases
from memory_daemon.requests import DemoRequests
from memory_daemon.services import DemoJobs, DemoNodes, DemoSources

_LOGGER = logging.getLogger(__name__)

GIB = 2**30
_STEP_S = {"5m": 1.0, "1h": 10.0, "24h": 240.0, "7d": 1680.0}
_RUNNING = (ModelState.READY, ModelState.STARTING)


def _seed() -> list[tuple[ModelDefinition, ModelState, str | None]]:
    def d(mid: str, name: str, path: str, tags: list[str], **settings: Any) -> ModelDefinition:
        return ModelDefinition(id=mid, served_name=name, model_path=path, tags=tags,
                               settings=LlamaCppSettings(**settings), auto_start=mid == "gemma3-270m",
                               sources=ModelSource(hf_repo=f"example/{name}-GGUF"))
    return [
        (d("gemma3-270m", "gemma3-270m", f"{DEMO_MODELS_DIR}/gemma-3-270m-Q4_K_M.gguf", ["demo", "small"],
           ctx_size=8192, parallel=2), ModelState.READY, None),  # a base model: no chat template
        (d("qwen25-coder-7b", "qwen2.5-coder-7b", "~/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf", ["code", "chat"],
           ctx_size=32768, n_gpu_layers=-1, flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0"),
         ModelState.READY, None),
        (d("nomic-embed", "nomic-embed-text", "~/models/nomic-embed-text-v1.5.f16.gguf", ["embeddings"],
           embeddings=True, pooling="mean"), ModelState.STARTING, None),
        (d("llama31-8b", "llama3.1-8b", "~/models/Meta-Llama-3.1-8B-Instruct-Q6_K.gguf", ["chat"],
           ctx_size=131072, n_gpu_layers=-1), ModelState.FAILED,
         "llama-server exited 1: cudaMalloc failed: out of memory (needed 16.0 GiB for the KV cache)"),
        (d("mistral-small", "mistral-small-24b", "~/models/Mistral-Small-24B-Instruct-Q4_K_M.gguf", ["chat", "large"],
           ctx_size=16384), ModelState.STOPPED, None),
        (ModelDefinition(id="qwen25-7b-vllm", served_name="qwen2.5-7b-instruct-awq", runtime="vllm",
                         model_path="~/models/Qwen2.5-7B-Instruct-AWQ", tags=["chat"],
                         image="vllm/vllm-openai:v0.8.5", runtime_version="0.8.5",
                         vllm=VllmSettings(max_model_len=32768, max_num_seqs=64),
                         sources=ModelSource(hf_repo="Qwen/Qwen2.5-7B-Instruct-AWQ")),
         ModelState.STOPPED, None),  # vLLM, in a container on the workstation
    ]


def _demo_host() -> HostSnapshot:
    return HostSnapshot(node="local", cpu_percent=31, memory_total=64 * GIB, memory_used=int(27.4 * GIB),
                        gpus=[GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", memory_total=24 * GIB,
                                      memory_used=int(15.2 * GIB), utilization_percent=58, temperature_c=64)])


def _bare_host() -> HostSnapshot:
    return HostSnapshot(node="local", cpu_percent=37.5, memory_total=32 * GIB, memory_used=12 * GIB,
                        gpus=[GpuInfo(index=0, name="NVIDIA RTX 4070", memory_total=12 * GIB,
                                      memory_used=5 * GIB, utilization_percent=42.0)])


# The seeded demo traces a quarter of its /v1 requests to a collector on the LAN (the Settings page shows it).
DEMO_TRACING = TracingSettings(enabled=True, endpoint="http://otel-collector.lan:4318/v1/traces", sample_ratio=0.25)


class DemoDaemon(DemoReleases, DemoDownloads, DemoLmStudio, DemoSources, DemoNodes, DemoJobs, DemoAudit, DemoHostServices, DemoBackups, DemoRequests,
                 DemoDisk, DemoHub, DemoModelUpdates, DemoCaRotation, DemoConversations):
    """Same surface as ``DaemonClient``; nothing leaves the process.

    ``DemoDaemon()``: the demo's seeded fleet, with figures that move. ``DemoDaemon(models)``: a bare
    daemon with just these (stopped) models and nothing made up.
    """

    def __init__(self, models: list[ModelDefinition] | None = None) -> None:
        seeded = models is None
        self.live = seeded  # host load, history curves and log lines move with the clock
        self.seed_jobs = seeded
        self.base_url = "http://127.0.0.1:8484"
        self.home = "~/.local/share/mirbadllm" if seeded else "/tmp/mirbadllm"
        self.boot_id = uuid.uuid4().hex
        self.started_at = time.time() - (7200 if seeded else 3600)
        self.settings = DaemonSettings(tracing=DEMO_TRACING) if seeded else DaemonSettings()
        self.definitions: dict[str, ModelDefinition] = {}
        self.statuses: dict[str, ModelStatus] = {}
        self.keys: dict[str, ApiKeyInfo] = {}
        self.issued_secrets: list[str] = []
        self.log_lines: dict[str, list[str]] = {}
        self.history: dict[str, list[HistoryPoint]] = {}
        self.base_model_files: set[str] = set()
        self.hosts = [_demo_host() if seeded else _bare_host()]
        self.router: dict[str, RouterStats] = {}
        self.keys_at_rest: KeysAtRest | None = None  # a test sets the daemon's key-storage state (+ warning)
        self.ready_after: float | None = 2.0 if seeded else None
        self.unreachable = False
        self.closed = False
        self._last_id = 40 if seeded else 0
        self._events: list[Event] = []
        self._changed = asyncio.Event()
        self._logged = asyncio.Event()
        self._seed_nodes(seeded)
        self._seed_disk(seeded)
        self._seed_downloads(seeded)
        for d in models or []:
            self.definitions[d.id] = d
            self.statuses[d.id] = ModelStatus(id=d.id, served_name=d.served_name, state=ModelState.STOPPED)
        if seeded:
            self._seed_fleet()
        self._seed_model_updates(seeded)  # after the fleet: it gives two of its models a hub origin
        self._key_count = len(self.keys)

    def _seed_fleet(self) -> None:
        now = time.time()
        for n, (definition, state, error) in enumerate(_seed()):
            running = state in _RUNNING
            self.definitions[definition.id] = definition
            self.statuses[definition.id] = ModelStatus(
                id=definition.id, served_name=definition.served_name, state=state,
                endpoint=f"http://127.0.0.1:{18080 + n}" if running else None, pid=31200 + n if running else None,
                started_at=now - 3600 * (n + 1) if running else None, error=error,
                last_log_lines=["ggml_cuda_init: found 1 CUDA devices", "llama_kv_cache: cudaMalloc failed"] if error else [],
                restart_pending=definition.id == "qwen25-coder-7b", crash_count=3 if error else 0,
                restarts_paused=bool(error), config_hash="5f3a9c0e1b2d4e6f", running_config_hash="5f3a9c0e1b2d4e6f")
        self.keys = {"k1": ApiKeyInfo(id="k1", name="laptop", prefix="sk-mirbad-3f9a", created_at=now - 86400 * 12,
                                      last_used_at=now - 300),
                     "k2": ApiKeyInfo(id="k2", name="open-webui", prefix="sk-mirbad-77c1", created_at=now - 86400 * 3)}
        self.router = {"gemma3-270m": RouterStats(total=1843, failed=2, in_flight=1),
                       "qwen2.5-coder-7b": RouterStats(total=12055, failed=9, in_flight=3)}

    # --- what a demo or a test drives by hand -----------------------------------------------------
    def _record(self, name: str, *args: Any) -> None:
        """Every call passes here first (a seam where a test's subclass records calls or fails one)."""
        if self.unreachable:
            raise DaemonError(0, "unreachable", f"cannot reach the daemon at {self.base_url}")

    def publish(self, type_: str, model: str | None = None, **data: Any) -> Event:
        self._last_id += 1
        event = Event(id=self._last_id, ts=time.time(), type=type_, model=model, data=data)
        self._events.append(event)
        self._changed.set()
        return event

    def _publish(self, type_: str, model: str | None = None, **data: Any) -> Event:
        return self.publish(type_, model, **data)

    def set_state(self, model_id: str, state: ModelState, **kw: Any) -> ModelStatus:
        """Move a model to ``state`` (a running one keeps its pid, or gets one) and publish it."""
        old = self.statuses[model_id]
        pid = kw.pop("pid", (old.pid or 4242) if state in _RUNNING else None)
        self.statuses[model_id] = old.model_copy(update={"state": state, "pid": pid, **kw})
        self.publish("model.state", model_id, state=state.value, previous=old.state.value)
        return self.statuses[model_id]

    def restart_daemon(self) -> None:
        """A new daemon run: new boot id, ids start again at 1."""
        self.boot_id = uuid.uuid4().hex
        self._events.clear()
        self._last_id = 0
        self._changed.set()

    def add_log_line(self, model_id: str, line: str) -> None:
        self.log_lines.setdefault(model_id, []).append(line)
        self._logged.set()

    def _view(self, model_id: str) -> ModelView:
        if model_id not in self.definitions:
            raise DaemonError(404, "model_not_found", f"no model '{model_id}'")
        return ModelView(definition=self.definitions[model_id], status=self.statuses[model_id])

    def _start(self, model_id: str, **kw: Any) -> ModelStatus:
        index = list(self.definitions).index(model_id)
        helpers = [RpcHelper(node=n, state="ready") for n in self.definitions[model_id].rpc_nodes]
        status = self.set_state(model_id, ModelState.STARTING, endpoint=f"http://127.0.0.1:{18080 + index}",
                                started_at=time.time(), error=None, restarts_paused=False, rpc_helpers=helpers,
                                **kw)
        if self.ready_after is not None:
            asyncio.get_running_loop().call_later(self.ready_after, self._become_ready, model_id)
        return status

    def _become_ready(self, model_id: str) -> None:
        status = self.statuses.get(model_id)
        if status is not None and status.state == ModelState.STARTING:
            self.set_state(model_id, ModelState.READY)

    def _stop(self, model_id: str) -> ModelStatus:
        helpers = [RpcHelper(node=n, state="stopped") for n in self.definitions[model_id].rpc_nodes]
        return self.set_state(model_id, ModelState.STOPPED, endpoint=None, started_at=None, restart_pending=False,
                              rpc_helpers=helpers)

    # --- DaemonClient surface ---------------------------------------------------------------------
    async def close(self) -> None:
        self.closed = True

    async def healthz(self) -> bool:
        return not self.unreachable

    async def plan(self, query: PlanQuery) -> Plan:
        """The seeded node's ways to run a file: its RTX 4090 (free now with the context shown) and the CPU."""
        self._record("plan", query)
        settings = query.settings.model_copy(update={"ctx_size": query.ctx_size}) if query.ctx_size else query.settings
        fit = await DemoSources.fit(self, FitQuery(model_path=query.model_path, hf=query.hf, settings=settings))
        layers, ctx = fit.summary.block_count + 1, query.ctx_size or 32768
        weights, kv = fit.estimate.weights_bytes, fit.estimate.kv_cache_bytes
        gpu_need = weights + kv + GIB // 2
        on_gpu = settings.model_copy(update={"gpus": [0], "n_gpu_layers": layers, "ctx_size": ctx})
        on_cpu = settings.model_copy(update={"gpus": [], "n_gpu_layers": 0, "ctx_size": ctx})
        gpu_state: PlanState = "free" if gpu_need <= int(8.3 * GIB) else "needs_room" if gpu_need <= 23 * GIB \
            else "too_big"
        options = [
            PlanOption(kind="gpu", label="GPU 0 (NVIDIA GeForce RTX 4090)", node="local", gpus=[0], state=gpu_state,
                       ctx_size=ctx, max_ctx_size=32768, max_ctx_size_empty=131072, n_gpu_layers=layers,
                       settings=on_gpu, args=["--device", "CUDA0", "--n-gpu-layers", str(layers), "--ctx-size", str(ctx)],
                       estimate=fit.estimate, message=f"the demo's figures, with a context of {ctx} tokens",
                       devices=[DeviceUse(device="cpu", needed_bytes=GIB // 2, free_bytes=35 * GIB,
                                          capacity_bytes=63 * GIB),
                                DeviceUse(device="CUDA0", gpu_index=0, name="NVIDIA GeForce RTX 4090",
                                          needed_bytes=gpu_need, free_bytes=int(8.3 * GIB), capacity_bytes=23 * GIB)]),
            PlanOption(kind="cpu", label="CPU only", node="local", state="free" if fit.fits else "needs_room",
                       ctx_size=ctx, max_ctx_size=fit.max_ctx_size, max_ctx_size_empty=fit.max_ctx_size,
                       settings=on_cpu, args=["--device", "none", "--n-gpu-layers", "0", "--ctx-size", str(ctx)],
                       estimate=fit.estimate, message=fit.message,
                       devices=[DeviceUse(device="cpu", needed_bytes=fit.estimate.total_bytes, free_bytes=35 * GIB,
                                          capacity_bytes=63 * GIB)])]
        node = NodePlan(node="local", source=fit.source, summary=fit.summary, memory_total=fit.memory_total,
                        memory_available=fit.memory_available, options=options)
        return Plan(source=fit.source, summary=fit.summary, nodes=[node])

    async def status(self) -> StatusResponse:
        self._record("status")
        info = DaemonInfo(version=self.daemon_version, host="127.0.0.1", port=8484, api_url=f"{self.base_url}/v1",
                          keys_required=self.settings.require_api_keys or self.settings.lan_access,
                          started_at=self.started_at, home=self.home)
        hosts = [_moving(h, time.time()) for h in self.hosts] if self.live else list(self.hosts)
        return StatusResponse(daemon=info, models=list(self.statuses.values()), router=dict(self.router),
                              hosts=hosts, last_event_id=self._last_id, keys_at_rest=self.keys_at_rest)

    async def events(self, since: int, timeout: float = 30.0) -> EventsPage:
        self._record("events", since)
        if since > self._last_id:
            return EventsPage(boot_id=self.boot_id, last_id=self._last_id, events=[], reset=True)
        if since == self._last_id:
            self._changed.clear()
            try:
                async with asyncio.timeout(timeout):  # wait_for can swallow a cancel on 3.11
                    await self._changed.wait()
            except TimeoutError:
                pass
        if self.unreachable:
            raise DaemonError(0, "unreachable", "daemon went away")
        if since > self._last_id:  # it restarted while we waited
            return EventsPage(boot_id=self.boot_id, last_id=self._last_id, events=[], reset=True)
        return EventsPage(boot_id=self.boot_id, last_id=self._last_id,
                          events=[e for e in self._events if e.id > since])

    async def list_models(self) -> list[ModelView]:
        self._record("list_models")
        return [self._view(i) for i in self.definitions]

    async def get_model(self, model_id: str) -> ModelView:
        self._record("get_model", model_id)
        return self._view(model_id)

    async def create_model(self, definition: ModelDefinition) -> ModelView:
        self._record("create_model", definition)
        if definition.id in self.definitions:
            raise DaemonError(409, "model_exists", f"model '{definition.id}' already exists")
        self.definitions[definition.id] = definition
        self.statuses[definition.id] = ModelStatus(id=definition.id, served_name=definition.served_name,
                                                   state=ModelState.STOPPED)
        self.publish("model.added", definition.id)
        return self._view(definition.id)

    async def update_model(self, definition: ModelDefinition) -> ModelView:
        self._record("update_model", definition)
        self._view(definition.id)
        self._note_audit("model.update", definition.id, self.definitions[definition.id], definition)
        self.definitions[definition.id] = definition
        status = self.statuses[definition.id]
        if status.state in _RUNNING:
            self.statuses[definition.id] = status.model_copy(update={"restart_pending": True})
        self.publish("model.updated", definition.id)
        return self._view(definition.id)

    async def delete_model(self, model_id: str) -> None:
        self._record("delete_model", model_id)
        self._view(model_id)
        del self.definitions[model_id], self.statuses[model_id]
        self.publish("model.removed", model_id)

    async def start_model(self, model_id: str, wait: bool = False, force: bool = False) -> ModelStatus:
        self._record("start_model", model_id)
        self._view(model_id)
        return self._start(model_id)

    async def stop_model(self, model_id: str) -> ModelStatus:
        self._record("stop_model", model_id)
        self._view(model_id)
        return self._stop(model_id)

    async def restart_model(self, model_id: str) -> ModelStatus:
        self._record("restart_model", model_id)
        self._view(model_id)
        return self._start(model_id, restart_pending=False)

    async def logs(self, model_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]:
        self._record("logs", model_id, tail, follow)
        name = self._view(model_id).definition.served_name
        if self.live and model_id not in self.log_lines:
            self.log_lines[model_id] = _demo_log(name)
        lines = self.log_lines.setdefault(model_id, [])
        sent = max(0, len(lines) - tail)
        n = 0
        while True:
            while sent < len(lines):
                yield lines[sent]
                sent += 1
            if not follow:
                return
            self._logged.clear()
            try:
                async with asyncio.timeout(1.5 if self.live else None):
                    await self._logged.wait()
            except TimeoutError:  # the demo's runtime keeps answering requests
                n += 1
                lines += [f"slot launch_slot_: id  {n % 2} | task {900 + n} | processing task",
                          (f"slot      release: id  {n % 2} | task {900 + n} | stop processing: "
                           f"n_past = {180 + n * 7}, truncated = 0")]

    async def model_history(self, model_id: str, range_: HistoryRange = "5m") -> HistorySeries:
        self._record("model_history", model_id, range_)
        self._view(model_id)
        step = _STEP_S[range_]
        points = self.history.get(model_id)
        if points is None and self.live:
            end = time.time()
            ready = self.statuses[model_id].state == ModelState.READY
            points = [HistoryPoint(ts=end - (299 - i) * step, values=_demo_values(i, end - (299 - i) * step, ready))
                      for i in range(300)]
        return HistorySeries(subject=model_id, range=range_, step_s=step, points=points or [])

    async def node_history(self, node_id: str = "local", range_: HistoryRange = "5m") -> HistorySeries:
        self._record("node_history", node_id, range_)
        step = _STEP_S[range_]
        end = time.time()
        points = [HistoryPoint(ts=end - (299 - i) * step, values=_node_values(i))
                  for i in range(300)] if self.live else []
        return HistorySeries(subject=node_id, range=range_, step_s=step, points=points)

    async def list_keys(self) -> list[ApiKeyInfo]:
        self._record("list_keys")
        return list(self.keys.values())

    async def create_key(self, name: str) -> ApiKeyCreated:
        self._record("create_key", name)
        self._key_count += 1
        secret = f"sk-mirbad-{uuid.uuid4().hex}"
        info = ApiKeyInfo(id=f"k{self._key_count}", name=name, prefix=secret[:14], created_at=time.time())
        self.keys[info.id] = info
        self.issued_secrets.append(secret)
        self.publish("keys.changed")
        return ApiKeyCreated(info=info, key=secret)

    async def set_key_limits(self, key_id: str, limits: ApiKeyLimits) -> ApiKeyInfo:
        self._record("set_key_limits", key_id, limits)
        info = self.keys.get(key_id)
        if info is None:
            raise DaemonError(404, "key_not_found", f"no key '{key_id}'")
        changed = info.limits.model_copy(update=limits.model_dump(include=limits.model_fields_set))
        info = self.keys[key_id] = info.model_copy(update={"limits": changed})
        self.publish("keys.changed")
        return info

    async def revoke_key(self, key_id: str) -> None:
        self._record("revoke_key", key_id)
        if (revoked := self.keys.pop(key_id, None)) is None:
            raise DaemonError(404, "key_not_found", f"no key '{key_id}'")
        self._note_audit("key.revoke", key_id, revoked.model_dump(include={"id", "name", "prefix", "limits"}))
        self.publish("keys.changed")

    async def get_settings(self) -> DaemonSettings:
        self._record("get_settings")
        return self.settings

    async def put_settings(self, settings: DaemonSettings) -> DaemonSettings:
        self._record("put_settings", settings)
        try:  # as the daemon reads the body: 422 naming each bad field; a section not sent stays as it is
            settings = DaemonSettings.model_validate(settings.model_dump(mode="json", exclude_unset=True))
        except ValidationError as exc:
            raise DaemonError(422, "invalid_settings", "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())) from None
        settings = settings.model_copy(update={name: getattr(self.settings, name) for name in
                                               ("backup", "audit_retention_days", "tracing")
                                               if name not in settings.model_fields_set})
        if settings.lan_access and not self.keys:  # as the daemon: /v1 on the LAN always requires keys
            raise DaemonError(409, "keys_required", "Create an API key first: /v1 on the LAN always requires keys.")
        self._note_audit("settings.update", "", self.settings, settings)
        self.settings = settings
        self.publish("settings.changed")
        return settings

    async def mirror(self, query: MirrorQuery) -> Transfer:
        """The version is on the node at once: a finished mirror transfer, nothing registered."""
        self._record("mirror", query)
        source = self.definitions.get(query.model_id or "")
        name = (query.path or (source.model_path if source else "model.gguf")).rsplit("/", 1)[-1]
        return self._transfer("mirror", f"{name} -> {query.target_node}", query.target_node, [f"~/models/{name}"])

    async def shutdown(self, stop_models: bool = False) -> dict[str, Any]:
        """There is no process to stop; stopping the models is shown as it would happen."""
        self._record("shutdown", stop_models)
        running = [i for i, st in self.statuses.items() if st.state in _RUNNING]
        for model_id in running if stop_models else []:
            self._stop(model_id)
        return {"pid": 4321, "stopped_models": running if stop_models else []}


def _moving(host: HostSnapshot, t: float) -> HostSnapshot:
    """The host's load, as the demo shows it: swaying around its seeded figures."""
    gpus = [g.model_copy(update={"utilization_percent": (g.utilization_percent or 0) + 20 * math.sin(t / 5)})
            for g in host.gpus]
    return host.model_copy(update={"cpu_percent": (host.cpu_percent or 0) + 6 * math.sin(t / 7), "gpus": gpus})


def _demo_values(i: int, ts: float, ready: bool) -> dict[str, float | None]:
    if not ready:
        return {k: None for k in ("gen_tps", "prompt_tps", "requests_running", "requests_waiting",
                                  "kv_cache_ratio", "rss_bytes", "cpu_percent", "gpu_mem_bytes", "gpu_util_percent")}
    burst = max(0.0, math.sin(i / 9.0)) * (0.6 + 0.4 * math.sin(i / 23.0))
    return {
        "gen_tps": round(burst * 92 + (3 if burst else 0), 2),
        "prompt_tps": round(max(0.0, math.sin(i / 9.0 + 0.4)) * 1450, 1),
        "requests_running": float(round(burst * 3)),
        "requests_waiting": float(max(0, round(burst * 5) - 3)),
        "kv_cache_ratio": 0.12 + 0.5 * burst,
        "rss_bytes": 1.9 * GIB + 0.05 * GIB * math.sin(i / 40),
        "cpu_percent": 8 + 70 * burst,
        "gpu_mem_bytes": 5.4 * GIB + 0.8 * GIB * burst,
        "gpu_util_percent": 4 + 90 * burst,
    }


def _node_values(i: int) -> dict[str, float | None]:
    burst = max(0.0, math.sin(i / 9.0))
    return {"cpu_percent": 12 + 60 * burst, "mem_used_bytes": 27.4 * GIB + 2 * GIB * burst,
            "mem_total_bytes": 64.0 * GIB, "gpu_mem_used_bytes": 15.2 * GIB + 1.5 * GIB * burst,
            "gpu_mem_total_bytes": 24.0 * GIB, "gpu_util_percent": 5 + 85 * burst}


def _demo_log(name: str) -> list[str]:
    return [
        "build: 6543 (a1b2c3d4) with cc (Debian 12.2.0) for x86_64-linux-gnu",
        "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32",
        "ggml_cuda_init: found 1 CUDA devices: Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9",
        f"main: loading model '{name}'",
        "llama_model_loader: loaded meta data with 41 key-value pairs and 339 tensors",
        "load_tensors: offloaded 29/29 layers to GPU",
        "llama_context: n_ctx = 32768, n_batch = 2048, n_ubatch = 512, flash_attn = 1",
        "llama_kv_cache: CUDA0 KV buffer size = 1792.00 MiB",
        "main: model loaded",
        "main: server is listening on http://127.0.0.1:18081 - starting the main loop",
        "srv  update_slots: all slots are idle",
        "slot launch_slot_: id  0 | task 812 | processing task",
        "slot update_slots: id  0 | task 812 | prompt done, n_past = 412, n_tokens = 412",
        "slot      release: id  0 | task 812 | stop processing: n_past = 655, truncated = 0",
        "slot print_timing: id  0 | task 812 | prompt eval time = 118.40 ms / 412 tokens (3479.7 tokens per second)",
        "slot print_timing: id  0 | task 812 |        eval time = 2644.19 ms / 243 tokens (91.9 tokens per second)",
        "srv  update_slots: all slots are idle",
    ]
