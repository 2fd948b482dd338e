"""One llama.cpp model across nodes, on the daemon's side: ``rpc_nodes`` checked on save, the
helpers' rpc-servers started before the main model (grants naming the main node) and stopped with
it, a failed start leaving none behind, a helper offline making the model not ready.

The orchestrator talks to hand-written fake agents that speak the agent's contracts
(``agent.api.rpc``); the real agents, tunnel and llama.cpp are in tests/fleet/test_rpc_split.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.api.client import AgentError
from agent.api.models import (
    InstanceInfo,
    InstancesPage,
    InstanceState,
    LaunchSpec,
    TelemetrySample,
)
from agent.api.rpc import RpcServerInfo, RpcServerRequest, RpcServerState
from agent.api.sources import FitReport, FitRequest, GgufSummary, MemoryEstimate
from daemon.api.models import ModelDefinition, ModelState
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.models.orchestrator import Orchestrator, OrchestratorError
from daemon.models.registry import Registry, RegistryError, definition_hash
from daemon.models.restarts import RestartBook
from daemon.models.rpc import grant_of
from daemon.nodes.links import AgentLink, Links

MAIN, HELPER, OTHER = "a" * 64, "b" * 64, "c" * 64
NAMES = {"local": "this-machine", MAIN: "main-box", HELPER: "helper-box", OTHER: "old-box"}


class FakeAgent:
    """An agent's instance and rpc-server routes, as the daemon calls them."""

    def __init__(self, url: str) -> None:
        self.base_url = url
        self.running: dict[str, InstanceInfo] = {}
        self.servers: dict[str, RpcServerInfo] = {}
        self.specs: list[LaunchSpec] = []
        self.refuse_start: AgentError | None = None
        self.refuse_rpc: AgentError | None = None
        self.rpc_refusals: list[AgentError] = []  # given once each, before refuse_rpc
        self.version = 0

    async def fit(self, request: FitRequest) -> FitReport:
        """The file's estimate: the whole model, 40 GiB (more than any one node here has); asked with
        ``rpc_devices``, the main's share: 2 GiB here, 38 GiB on the helpers (as agent.rpc.main_share)."""
        if request.rpc_devices:
            share = MemoryEstimate(ctx_size=4096, parallel=4, weights_bytes=2 << 30, kv_cache_bytes=0,
                                   compute_bytes=0, overhead_bytes=0, host_bytes=2 << 30, total_bytes=2 << 30)
            return FitReport(summary=GgufSummary(architecture="llama", file_size=38 << 30, tensor_bytes=38 << 30,
                                                 tensor_count=400), estimate=share, memory_total=16 << 30,
                             memory_available=1 << 30, reserve_bytes=0, fits=False, max_ctx_size=0,
                             remote_bytes=38 << 30)
        whole = MemoryEstimate(ctx_size=4096, parallel=4, weights_bytes=38 << 30, kv_cache_bytes=1 << 30,
                               compute_bytes=1 << 30, overhead_bytes=0, host_bytes=40 << 30, total_bytes=40 << 30)
        return FitReport(summary=GgufSummary(architecture="llama", file_size=38 << 30, tensor_bytes=38 << 30,
                                             tensor_count=400), estimate=whole, memory_total=16 << 30,
                         memory_available=1 << 30, reserve_bytes=0, fits=False, max_ctx_size=0)

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        return InstancesPage(version=self.version, instances=list(self.running.values()))

    async def start(self, spec: LaunchSpec) -> InstanceInfo:
        self.specs.append(spec)
        if self.refuse_start is not None:
            raise self.refuse_start
        info = InstanceInfo(instance_id=spec.instance_id, state=InstanceState.READY, served_name=spec.served_name,
                            endpoint="http://127.0.0.1:1", pid=1000)
        self.running[spec.instance_id] = info
        self.version += 1
        return info

    async def stop(self, instance_id: str, timeout: float = 10.0) -> InstanceInfo:
        info = self.running.pop(instance_id)
        self.version += 1
        return info.model_copy(update={"state": InstanceState.STOPPED})

    async def start_rpc_server(self, request: RpcServerRequest) -> RpcServerInfo:
        if self.rpc_refusals:
            raise self.rpc_refusals.pop(0)
        if self.refuse_rpc is not None:
            raise self.refuse_rpc
        info = RpcServerInfo(grant_id=request.grant_id, peer_node_id=request.peer_node_id,
                             state=RpcServerState.READY, pid=2000, port=50052, devices=["CPU"],
                             memory_bytes=request.memory_bytes)
        self.servers[request.grant_id] = info
        return info

    async def stop_rpc_server(self, grant_id: str) -> RpcServerInfo:
        if grant_id not in self.servers:
            raise AgentError(404, "rpc_server_not_found", "no such grant")
        return self.servers.pop(grant_id).model_copy(update={"state": RpcServerState.STOPPED})

    async def rpc_servers(self) -> list[RpcServerInfo]:
        return list(self.servers.values())


class Fleet:
    def __init__(self, tmp_path: Path, lends: dict[str, bool | None] | None = None) -> None:
        self.events = EventBus()
        self.registry = Registry(tmp_path / "models.json")
        self.registry.known_nodes = lambda: NAMES
        lending = lends if lends is not None else {HELPER: True, OTHER: False}
        self.registry.node_lends = lambda node: lending.get(node)
        self.links = Links()
        self.orch = Orchestrator(self.registry, self.events, RestartBook(tmp_path), self.links)
        self.agents = {node: FakeAgent(f"https://10.0.0.{i}:8470") for i, node in enumerate((MAIN, HELPER), 1)}
        for node, agent in self.agents.items():
            self.links.add(AgentLink(node, agent, self.orch.on_instances))  # type: ignore[arg-type]
            self.memory(node, total=64 << 30, available=60 << 30)

    def memory(self, node: str, *, total: int, available: int) -> None:
        """The node's telemetry figures, as its agent's sample would say them."""
        self.links[node].latest_sample = TelemetrySample(seq=1, ts=0, cpu_percent=0, memory_total=total,
                                                         memory_used=total - available, memory_available=available)

    async def open(self) -> Fleet:
        for link in self.links:
            await link.refresh()
        return self

    @property
    def main(self) -> FakeAgent:
        return self.agents[MAIN]

    @property
    def helper(self) -> FakeAgent:
        return self.agents[HELPER]


def _definition(**fields: object) -> ModelDefinition:
    base: dict[str, object] = {"id": "big", "served_name": "big", "node": MAIN, "model_path": "/m/big.gguf",
                               "rpc_nodes": ["helper-box"]}
    return ModelDefinition.model_validate({**base, **fields})


async def test_rpc_nodes_are_stored_as_ids_and_refused_clearly(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path)
    saved = await fleet.registry.add(_definition())
    assert saved.rpc_nodes == [HELPER]  # named by its name, stored by id
    for fields, code, words in (
            ({"rpc_nodes": ["nowhere"]}, "unknown_node", "rpc_nodes: node 'nowhere' is unknown"),
            ({"rpc_nodes": ["main-box"]}, "invalid_model", "the model's own node"),
            ({"rpc_nodes": [HELPER, "helper-box"]}, "invalid_model", "named twice"),
            ({"rpc_nodes": ["old-box"]}, "invalid_model", "has no llama.cpp rpc-server"),
            ({"rpc_nodes": ["local"]}, "invalid_model", "listens on 127.0.0.1 only"),
            ({"node": "auto"}, "invalid_model", "not 'auto'"),
            ({"node": "local", "rpc_nodes": ["local"]}, "invalid_model", "make it the model's node (the main)"),
            ({"runtime": "vllm", "model_path": "/m/big"}, "invalid_model", "only llama.cpp")):
        with pytest.raises(RegistryError) as caught:
            await fleet.registry.update(_definition(**fields))
        assert (caught.value.status, caught.value.code) == (422, code), fields
        assert words in caught.value.message, caught.value.message
    assert fleet.registry.require("big").rpc_nodes == [HELPER]  # nothing refused was stored


async def test_this_machines_agent_is_a_main_node_whose_grants_name_its_certificate(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path)
    local = FakeAgent("https://127.0.0.1:8471")
    fleet.links.add(AgentLink("local", local, fleet.orch.on_instances))  # type: ignore[arg-type]
    await fleet.open()
    saved = await fleet.registry.add(_definition(node="local"))
    assert (saved.node, saved.rpc_nodes) == ("local", [HELPER])
    with pytest.raises(DaemonProblem) as caught:  # no certificate known for it: nothing starts anywhere
        await fleet.orch.start("big")
    assert (caught.value.status, caught.value.code) == (409, "main_unidentified")
    assert "this-machine" in caught.value.message and fleet.helper.servers == {} and local.specs == []

    certificate = "d" * 64  # what daemon.tls.ensure_local_agent_identity answers for the cert it wrote
    fleet.orch.rpc.identify("local", certificate)
    status = await fleet.orch.start("big")
    assert status.state == ModelState.READY and status.node == "local"
    (server,) = fleet.helper.servers.values()
    assert server.peer_node_id == certificate, "the grant names the certificate the local agent presents"
    (spec,) = local.specs
    assert [(p.agent_url, p.node_id) for p in spec.rpc_peers] == [("https://10.0.0.2:8470", HELPER)]
    await fleet.orch.stop("big")
    assert fleet.helper.servers == {} and local.running == {}


async def test_a_helper_that_does_not_say_does_not_block_a_save(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, lends={})
    assert (await fleet.registry.add(_definition())).rpc_nodes == [HELPER]


def test_the_definition_hash_changes_with_the_helpers() -> None:
    alone = _definition(rpc_nodes=[])
    assert definition_hash(_definition(rpc_nodes=[HELPER])) != definition_hash(alone)
    assert definition_hash(_definition(rpc_nodes=[HELPER, OTHER])) != definition_hash(_definition(rpc_nodes=[HELPER]))


async def test_start_opens_the_helpers_then_the_main_model_and_stop_closes_them(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.registry.add(_definition())
    status = await fleet.orch.start("big")
    assert status.state == ModelState.READY and status.node == MAIN
    (server,) = fleet.helper.servers.values()
    assert server.peer_node_id == MAIN and grant_of("big", server.grant_id)  # only the main node may reach it
    (spec,) = fleet.main.specs
    assert [(p.agent_url, p.grant_id, p.node_id) for p in spec.rpc_peers] == [
        ("https://10.0.0.2:8470", server.grant_id, HELPER)]
    assert [(h.node, h.state, h.grant_id) for h in status.rpc_helpers] == [(HELPER, "ready", server.grant_id)]
    assert not status.restart_pending
    stopped = await fleet.orch.stop("big")
    assert fleet.helper.servers == {} and fleet.main.running == {}
    assert stopped.state == ModelState.STOPPED and [h.state for h in stopped.rpc_helpers] == ["stopped"]


async def test_a_failed_main_start_stops_the_helpers_rpc_servers(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.registry.add(_definition())
    fleet.main.refuse_start = AgentError(422, "runtime_unavailable", "no llama.cpp here")
    with pytest.raises(OrchestratorError) as caught:
        await fleet.orch.start("big")
    assert caught.value.code == "runtime_unavailable"
    assert len(fleet.main.specs) == 1 and fleet.helper.servers == {}


async def test_a_helper_refusing_is_said_and_the_main_model_is_not_started(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.registry.add(_definition())
    fleet.helper.refuse_rpc = AgentError(507, "not_enough_memory", "only 1.0 GiB free")
    with pytest.raises(DaemonProblem) as caught:
        await fleet.orch.start("big")
    assert (caught.value.status, caught.value.code) == (507, "not_enough_memory")
    assert "helper node 'helper-box'" in caught.value.message and "1.0 GiB" in caught.value.message
    assert fleet.main.specs == []
    status = fleet.orch.status_by_id("big")
    assert [(h.state, h.error) for h in status.rpc_helpers] == [("failed", "only 1.0 GiB free")]


async def test_a_helper_going_offline_makes_the_model_not_ready_with_an_event(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.registry.add(_definition())
    await fleet.orch.start("big")
    fleet.orch.on_instances(MAIN, fleet.links[MAIN].instances)
    assert fleet.orch.status_by_id("big").state == ModelState.READY
    helper = fleet.links[HELPER]
    helper.online, helper.last_error = False, "no route to host"
    fleet.orch.on_instances(HELPER, {})
    status = fleet.orch.status_by_id("big")
    assert status.state == ModelState.FAILED and "helper node 'helper-box' is offline" in (status.error or "")
    assert [(h.node, h.state) for h in status.rpc_helpers] == [(HELPER, "offline")]
    (event,) = [e for e in fleet.events._page(0).events if e.type == "model.state" and e.data["state"] == "failed"]
    assert event.model == "big" and event.data["helper"] == HELPER and "no route to host" in event.data["error"]
    with pytest.raises(DaemonProblem) as caught:  # nothing starts without it, nothing is torn down
        await fleet.orch.start("big")
    assert caught.value.code == "node_offline" and "helper node" in caught.value.message
    assert len(fleet.helper.servers) == 1 and len(fleet.main.specs) == 1
    helper.online, helper.last_error = True, None  # back, its rpc-server still serving the main
    fleet.orch.on_instances(HELPER, {})
    assert fleet.orch.status_by_id("big").state == ModelState.READY
    assert [e.data["state"] for e in fleet.events._page(0).events if e.type == "model.state"][-1] == "ready"


async def test_after_a_daemon_restart_stop_finds_the_helpers_grants(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.registry.add(_definition())
    await fleet.orch.start("big")
    fresh = Orchestrator(fleet.registry, fleet.events, RestartBook(tmp_path), fleet.links)
    for link in fleet.links:
        link._on_change = fresh.on_instances  # the restarted daemon's links
    fleet.helper.servers["other-123456789abc"] = RpcServerInfo(grant_id="other-123456789abc", peer_node_id=MAIN,
                                                               state=RpcServerState.READY)
    await fresh.stop("big")
    assert list(fleet.helper.servers) == ["other-123456789abc"]  # only this model's grant was stopped


async def test_a_start_on_request_does_not_make_room_for_the_whole_model_on_the_main_node(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    fleet.memory(MAIN, total=16 << 30, available=4 << 30)
    await fleet.registry.add(_definition())  # its file's estimate would be the whole model: 40 GiB
    status = await fleet.orch.start("big", in_flight=lambda _name: 0)
    assert status.state == ModelState.READY and len(fleet.main.specs) == 1  # its share, 2 GiB, fits
    (server,) = fleet.helper.servers.values()
    assert server.memory_bytes == 38 << 30  # the helper's grant lends the rest, and its agent checks it
