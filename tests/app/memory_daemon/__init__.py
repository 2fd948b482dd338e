"""``DemoDaemon``: an in-memory daemon, a test fake of the app's tests only (the product's demo is
``mirbadllm/demo.py``: the real daemon).

It answers every call of ``DaemonClient`` (``tests/app/test_demo_conformance.py`` holds it to that)
like the daemon would: state changes publish events with monotonic ids and a ``boot_id``, so the
app's ``EventFeed`` runs for real. ``DemoDaemon(models)`` is a bare daemon holding just those models
(stopped), one machine without paired nodes, no keys, no jobs and no made-up figures, the state the
app's tests start from (their ``FakeDaemonClient`` adds only recorded calls and injected failures).
Its parts: nodes, sources and jobs (``memory_daemon.services``), the hub (``memory_daemon.hub``), saved chats
(``memory_daemon.conversations``), and one module per other feature.

What a test may set directly: ``definitions``/``statuses``, ``keys``, ``settings``,
``hosts``, ``history`` (points per model), ``log_lines`` (with ``add_log_line``), ``base_model_files``
(GGUFs without a chat template), ``ready_after`` (seconds until a started model is ready; ``None``:
it stays starting), ``unreachable`` (every call fails like a stopped daemon); and ``set_state``,
``publish``, ``restart_daemon``, ``add_waiting_agent``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from daemon.api.client import DaemonError
from daemon.api.contracts import GpuInfo
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
    ModelState,
    ModelStatus,
    ModelView,
    RouterStats,
    StatusResponse,
)
from daemon.api.plan import DeviceUse, NodePlan, Plan, PlanOption, PlanQuery, PlanState
from daemon.api.rpc_split import RpcHelper
from daemon.api.sources import FitQuery, Transfer
from memory_daemon.audit import DemoAudit
from memory_daemon.backup import DemoBackups
from memory_daemon.ca_rotation import DemoCaRotation
from memory_daemon.conversations import DemoConversations
from memory_daemon.disk import DemoDisk
from memory_daemon.downloads import DemoDownloads
from memory_daemon.host_services import DemoHostServices
from memory_daemon.hub import DemoHub
from memory_daemon.lmstudio import DemoLmStudio
from memory_daemon.model_updates import DemoModelUpdates
from memory_daemon.releases import DemoReleases
from memory_daemon.services import DemoJobs, DemoNodes, DemoSources

_LOGGER = logging.getLogger(__name__)

GIB = 2**30
_STEP_S = {"5m": 1.0, "1h": 10.0, "24h": 240.0, "7d": 1680.0}
_RUNNING = (ModelState.READY, ModelState.STARTING)


def _bare_host() -> HostSnapshot:
    return HostSnapshot(node="local", cpu_percent=37.5, memory_total=32 * GIB, memory_used=12 * GIB,
                        gpus=[GpuInfo(index=0, name="NVIDIA RTX 4070", memory_total=12 * GIB,
                                      memory_used=5 * GIB, utilization_percent=42.0)])


class DemoDaemon(DemoReleases, DemoDownloads, DemoLmStudio, DemoSources, DemoNodes, DemoJobs, DemoAudit, DemoHostServices, DemoBackups,
                 DemoDisk, DemoHub, DemoModelUpdates, DemoCaRotation, DemoConversations):
    """Same surface as ``DaemonClient``; nothing leaves the process. ``DemoDaemon(models)``: a bare
    daemon with just these (stopped) models and nothing made up.
    """

    def __init__(self, models: list[ModelDefinition]) -> None:
        self.base_url = "http://127.0.0.1:8484"
        self.home = "/tmp/mirbadllm"
        self.boot_id = uuid.uuid4().hex
        self.started_at = time.time() - 3600
        self.settings = DaemonSettings()
        self.definitions: dict[str, ModelDefinition] = {}
        self.statuses: dict[str, ModelStatus] = {}
        self.keys: dict[str, ApiKeyInfo] = {}
        self.issued_secrets: list[str] = []
        self.log_lines: dict[str, list[str]] = {}
        self.history: dict[str, list[HistoryPoint]] = {}
        self.base_model_files: set[str] = set()
        self.hosts = [_bare_host()]
        self.router: dict[str, RouterStats] = {}
        self.ready_after: float | None = None
        self.unreachable = False
        self.closed = False
        self._last_id = 0
        self._events: list[Event] = []
        self._changed = asyncio.Event()
        self._logged = asyncio.Event()
        self._seed_nodes()
        self._seed_disk()
        self._seed_model_updates()
        for d in models:
            self.definitions[d.id] = d
            self.statuses[d.id] = ModelStatus(id=d.id, served_name=d.served_name, state=ModelState.STOPPED)
        self._key_count = len(self.keys)

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
        """This machine's ways to run a file: its GPU (free now with the context shown) and the CPU."""
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
        hosts = list(self.hosts)
        return StatusResponse(daemon=info, models=list(self.statuses.values()), router=dict(self.router),
                              hosts=hosts, last_event_id=self._last_id)

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
        self._view(model_id)
        lines = self.log_lines.setdefault(model_id, [])
        sent = max(0, len(lines) - tail)
        while True:
            while sent < len(lines):
                yield lines[sent]
                sent += 1
            if not follow:
                return
            self._logged.clear()
            await self._logged.wait()

    async def model_history(self, model_id: str, range_: HistoryRange = "5m") -> HistorySeries:
        self._record("model_history", model_id, range_)
        self._view(model_id)
        step = _STEP_S[range_]
        return HistorySeries(subject=model_id, range=range_, step_s=step, points=self.history.get(model_id, []))

    async def node_history(self, node_id: str = "local", range_: HistoryRange = "5m") -> HistorySeries:
        self._record("node_history", node_id, range_)
        return HistorySeries(subject=node_id, range=range_, step_s=_STEP_S[range_], points=[])

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
        if self.keys.pop(key_id, None) is None:
            raise DaemonError(404, "key_not_found", f"no key '{key_id}'")
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
