"""``FakeDaemonClient``: a hand-written, in-memory stand-in for ``daemon.api.client.DaemonClient``.

Same method names and signatures; every call is recorded in ``calls`` so tests can assert what the
app asked the daemon to do. State changes publish events exactly as the daemon's ring does
(monotonic ids, a ``boot_id``), so the app's ``EventFeed`` is exercised for real. Switches:
``unreachable`` makes every call fail like a stopped daemon; ``fail_next[method]`` fails one call;
``auto_ready`` makes a started model become ready on the next loop turn. Model sources and jobs
come from the demo daemon's in-memory ones (``app.demo_services``, without the demo's seeded
jobs); ``base_model_files`` lists the model paths whose GGUF has no chat template.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agent.api.models import GpuInfo
from agent.api.pairing import normalize_code, short_fingerprint
from agent.api.sources import FitReport
from app.demo_services import DemoJobs, DemoSources
from daemon.api.client import DaemonError
from daemon.api.models import (
    ApiKeyCreated,
    ApiKeyInfo,
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
    RequestRecord,
    StatusResponse,
)
from daemon.api.nodes import DiscoveredNode, NodeAddResult, NodeState, NodeView
from daemon.api.sources import FitQuery
from daemon.api.upgrades import RolloutState, RolloutView

_LOGGER = logging.getLogger(__name__)

API_URL = "http://127.0.0.1:8484/v1"


def definition(model_id: str, **kw: Any) -> ModelDefinition:
    return ModelDefinition(id=model_id, served_name=kw.pop("served_name", model_id),
                           model_path=kw.pop("model_path", f"/models/{model_id}.gguf"), **kw)


class FakeDaemonClient(DemoSources, DemoJobs):
    seed_jobs = False

    def __init__(self, models: list[ModelDefinition] | None = None) -> None:
        self.base_url = "http://127.0.0.1:8484"
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.unreachable = False
        self.fail_next: dict[str, DaemonError] = {}
        self.auto_ready = False
        self.boot_id = uuid.uuid4().hex
        self.settings = DaemonSettings()
        self.definitions: dict[str, ModelDefinition] = {}
        self.statuses: dict[str, ModelStatus] = {}
        self.keys: dict[str, ApiKeyInfo] = {}
        self.issued_secrets: list[str] = []
        self.log_lines: dict[str, list[str]] = {}
        self.history: dict[str, list[HistoryPoint]] = {}
        self.hosts = [HostSnapshot(node="local", cpu_percent=37.5, memory_total=32 * 2**30,
                                   memory_used=12 * 2**30,
                                   gpus=[GpuInfo(index=0, name="NVIDIA RTX 4070", memory_total=12 * 2**30,
                                                 memory_used=5 * 2**30, utilization_percent=42.0)])]
        self._events: list[Event] = []
        self._last_id = 0
        self._changed = asyncio.Event()
        self.closed = False
        # Nodes: this machine, and agents waiting to be paired with the code each one "prints".
        self.nodes: list[NodeView] = [NodeView(id="local", name="workstation", local=True, state=NodeState.ONLINE,
                                               memory_total=32 * 2**30, memory_available=20 * 2**30)]
        self.discovered: list[DiscoveredNode] = []
        self.agent_codes: dict[str, str] = {}
        self.base_model_files: set[str] = set()
        for d in models or []:
            self.definitions[d.id] = d
            self.statuses[d.id] = ModelStatus(id=d.id, served_name=d.served_name, state=ModelState.STOPPED)

    # --- test controls ----------------------------------------------------------------------------
    def publish(self, type_: str, model: str | None = None, **data: Any) -> Event:
        self._last_id += 1
        event = Event(id=self._last_id, ts=time.time(), type=type_, model=model, data=data)
        self._events.append(event)
        self._changed.set()
        return event

    def _publish(self, type_: str, model: str | None = None, **data: Any) -> Event:
        return self.publish(type_, model, **data)

    def _file_has_chat_template(self, path: str) -> bool | None:
        return path not in self.base_model_files

    async def fit(self, query: FitQuery) -> FitReport:
        self._record("fit", query)
        return await super().fit(query)

    def set_state(self, model_id: str, state: ModelState, **kw: Any) -> None:
        old = self.statuses[model_id]
        pid = kw.pop("pid", 4242 if state in (ModelState.STARTING, ModelState.READY) else None)
        self.statuses[model_id] = old.model_copy(update={"state": state, "pid": pid, **kw})
        self.publish("model.state", model_id, state=state.value, previous=old.state.value)

    def restart_daemon(self) -> None:
        """A new daemon run: new boot id, ids start again at 1."""
        self.boot_id = uuid.uuid4().hex
        self._events.clear()
        self._last_id = 0
        self._changed.set()

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.unreachable:
            raise DaemonError(0, "unreachable", f"cannot reach the daemon at {self.base_url}")
        if name in self.fail_next:
            raise self.fail_next.pop(name)

    def called(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]

    def _view(self, model_id: str) -> ModelView:
        if model_id not in self.definitions:
            raise DaemonError(404, "model_not_found", f"no model '{model_id}'")
        return ModelView(definition=self.definitions[model_id], status=self.statuses[model_id])

    # --- DaemonClient surface -----------------------------------------------------------------
    async def close(self) -> None:
        self.closed = True

    async def healthz(self) -> bool:
        return not self.unreachable

    async def status(self) -> StatusResponse:
        self._record("status")
        info = DaemonInfo(version="0.1.0", host="127.0.0.1", port=8484, api_url=API_URL,
                          keys_required=self.settings.require_api_keys or self.settings.lan_access,
                          started_at=time.time() - 3600, home="/tmp/mirbadllm")
        return StatusResponse(daemon=info, models=list(self.statuses.values()), hosts=self.hosts,
                              last_event_id=self._last_id)

    async def events(self, since: int, timeout: float = 30.0) -> EventsPage:
        self._record("events", since)
        if since > self._last_id:
            return EventsPage(boot_id=self.boot_id, last_id=self._last_id, events=[], reset=True)
        if self._last_id <= since:
            self._changed.clear()
            try:
                async with asyncio.timeout(timeout):  # wait_for can swallow a cancel on 3.11
                    await self._changed.wait()
            except TimeoutError:
                pass
        if self.unreachable:
            raise DaemonError(0, "unreachable", "daemon went away")
        if since > self._last_id:
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
        if status.state in (ModelState.READY, ModelState.STARTING):
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
        self.set_state(model_id, ModelState.STARTING, endpoint="http://127.0.0.1:18080",
                       started_at=time.time())
        if self.auto_ready:
            asyncio.get_running_loop().call_soon(self.set_state, model_id, ModelState.READY)
        return self.statuses[model_id]

    async def stop_model(self, model_id: str) -> ModelStatus:
        self._record("stop_model", model_id)
        self._view(model_id)
        self.set_state(model_id, ModelState.STOPPED, endpoint=None, started_at=None,
                       restart_pending=False)
        return self.statuses[model_id]

    async def restart_model(self, model_id: str) -> ModelStatus:
        self._record("restart_model", model_id)
        self._view(model_id)
        self.set_state(model_id, ModelState.STARTING, restart_pending=False)
        return self.statuses[model_id]

    async def logs(self, model_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]:
        self._record("logs", model_id, tail, follow)
        lines = self.log_lines.setdefault(model_id, [])
        sent = max(0, len(lines) - tail)
        while True:
            while sent < len(lines):
                yield lines[sent]
                sent += 1
            if not follow:
                return
            self._changed.clear()
            await self._changed.wait()

    def add_log_line(self, model_id: str, line: str) -> None:
        self.log_lines.setdefault(model_id, []).append(line)
        self._changed.set()

    async def model_history(self, model_id: str, range_: HistoryRange = "5m") -> HistorySeries:
        self._record("model_history", model_id, range_)
        return HistorySeries(subject=model_id, range=range_, step_s=1.0,
                             points=self.history.get(model_id, []))

    async def node_history(self, node_id: str = "local", range_: HistoryRange = "5m") -> HistorySeries:
        self._record("node_history", node_id, range_)
        return HistorySeries(subject=node_id, range=range_, step_s=1.0, points=[])  # type: ignore[arg-type]

    async def list_keys(self) -> list[ApiKeyInfo]:
        self._record("list_keys")
        return list(self.keys.values())

    async def create_key(self, name: str) -> ApiKeyCreated:
        self._record("create_key", name)
        key_id = f"k{len(self.issued_secrets) + 1}"
        secret = f"sk-mirbad-{uuid.uuid4().hex}"
        info = ApiKeyInfo(id=key_id, name=name, prefix=secret[:14], created_at=time.time())
        self.keys[key_id] = info
        self.issued_secrets.append(secret)
        self.publish("keys.changed")
        return ApiKeyCreated(info=info, key=secret)

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
        if settings.lan_access and not settings.require_api_keys:
            raise DaemonError(400, "keys_required", "LAN access requires API keys")
        self.settings = settings
        self.publish("settings.changed")
        return settings

    async def requests(self, limit: int = 100) -> list[RequestRecord]:
        self._record("requests", limit)
        return []

    async def shutdown(self, stop_models: bool = False) -> dict[str, Any]:
        self._record("shutdown", stop_models)
        running = [i for i, st in self.statuses.items() if st.state in (ModelState.READY, ModelState.STARTING)]
        for model_id in running if stop_models else []:
            self.set_state(model_id, ModelState.STOPPED, endpoint=None)
        return {"pid": 4321, "stopped_models": running if stop_models else []}

    # --- nodes ----------------------------------------------------------------------------------
    def add_waiting_agent(self, name: str, code: str, address: str = "10.20.0.2:9443") -> DiscoveredNode:
        fp = hashlib.sha256(name.encode()).hexdigest()
        host, port = address.rsplit(":", 1)
        entry = DiscoveredNode(name=name, address=address, host=host, port=int(port), fingerprint=fp,
                               short_fingerprint=short_fingerprint(fp), source="mdns")
        self.discovered.append(entry)
        self.agent_codes[fp] = code
        self.publish("node.discovered", name=name)
        return entry

    async def list_nodes(self) -> list[NodeView]:
        self._record("list_nodes")
        return list(self.nodes)

    async def get_node(self, node_id: str) -> NodeView:
        self._record("get_node", node_id)
        found = [n for n in self.nodes if n.id == node_id]
        if not found:
            raise DaemonError(404, "node_not_found", f"no paired node with id '{node_id}'")
        return found[0]

    async def discovered_nodes(self) -> list[DiscoveredNode]:
        self._record("discovered_nodes")
        return list(self.discovered)

    async def add_node_address(self, address: str) -> NodeAddResult:
        self._record("add_node_address", address)
        found = [d for d in self.discovered if d.address == address]
        if not found:
            raise DaemonError(502, "node_unreachable", f"No MirbadLLM agent answers at {address}")
        return NodeAddResult(discovered=found[0])

    async def pair_node(self, address: str, code: str, fingerprint: str) -> NodeView:
        self._record("pair_node", address, fingerprint)  # never the code, like the daemon
        entry = next((d for d in self.discovered if d.fingerprint == fingerprint), None)
        if entry is None:
            raise DaemonError(502, "node_unreachable", f"No agent waiting to be paired answers at {address}")
        if normalize_code(code) != normalize_code(self.agent_codes[fingerprint]):
            raise DaemonError(403, "wrong_code", "Wrong pairing code (4 tries left).")
        self.discovered.remove(entry)
        node = NodeView(id=hashlib.sha256(fingerprint.encode()).hexdigest(), name=entry.name, address=address,
                        state=NodeState.ONLINE, memory_total=64 * 2**30, memory_available=48 * 2**30,
                        fingerprint=fingerprint, paired_at=time.time(),
                        gpus=[GpuInfo(index=0, name="RTX 6000", uuid="GPU-remote-0", memory_total=48 * 2**30,
                                      memory_used=8 * 2**30, utilization_percent=12.0, temperature_c=48.0,
                                      power_w=95.0)])
        self.nodes.append(node)
        self.publish("node.paired", node=node.id)
        return node

    async def remove_node(self, node_id: str) -> None:
        self._record("remove_node", node_id)
        await self.get_node(node_id)
        self.nodes = [n for n in self.nodes if n.id != node_id]
        self.publish("node.removed", node=node_id)

    async def upgrade_status(self) -> RolloutView:
        self._record("upgrade_status")
        return RolloutView()

    async def start_upgrade(self, folder: str | None = None) -> RolloutView:
        self._record("start_upgrade", folder)
        return RolloutView(state=RolloutState.RUNNING, version="0.2.0")

    async def gpu_history(self, node_id: str, gpu: str, range_: HistoryRange = "5m") -> HistorySeries:
        self._record("gpu_history", node_id, gpu, range_)
        return HistorySeries(subject=f"{node_id}/{gpu}", range=range_, step_s=1.0, points=[])  # type: ignore[arg-type]
