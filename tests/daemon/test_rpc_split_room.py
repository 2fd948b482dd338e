"""Making room for one model across nodes: idle models unloaded on the main node and on each helper,
all or nothing, each unloading an event naming the split model; a model across nodes unloaded
frees its part on every node it holds one on (its helpers' rpc-servers stop).

The hand-written fake agents of test_rpc_split.py (their fit answers the main's share, 2 GiB, and
38 GiB for the helpers when asked with ``rpc_devices``); each node's memory is its telemetry sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.llamacpp import LlamaCppSettings
from daemon.api.models import ModelDefinition, ModelState
from daemon.errors import DaemonProblem
from daemon.models.orchestrator import OrchestratorError
from daemon.models.split_room import helper_shares
from tests.daemon.test_rpc_split import HELPER, MAIN, Fleet

GiB = 1 << 30


class Split(Fleet):
    busy: dict[str, int]

    async def add(self, model_id: str, node: str, budget_gib: float | None = None, **fields: object) -> None:
        await self.registry.add(ModelDefinition.model_validate(
            {"id": model_id, "served_name": model_id, "node": node, "model_path": f"/m/{model_id}.gguf",
             "memory_budget_gib": budget_gib, "start_on_request": True, **fields}))

    def in_flight(self, served_name: str) -> int:
        return getattr(self, "busy", {}).get(served_name, 0)

    async def load(self, *model_ids: str) -> None:
        """Load each as a request would, in order (the first is the least recently used)."""
        for model_id in model_ids:
            assert (await self.orch.ensure_ready(model_id, self.in_flight)).state == ModelState.READY

    def evictions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return [(e.model, e.data) for e in self.events._page(0).events if e.type == "model.evicted"]


async def test_a_helper_full_of_an_idle_model_unloads_it_for_the_split(tmp_path: Path) -> None:
    fleet = await Split(tmp_path).open()
    await fleet.add("old", HELPER, 30)
    await fleet.add("recent", HELPER, 20)
    await fleet.add("big", MAIN, rpc_nodes=[HELPER])
    await fleet.load("old", "recent")
    # the helper: 63 GiB less its 1 GiB reserve, 50 GiB held: 13 GiB room, the grant wants 38
    status = await fleet.orch.ensure_ready("big", fleet.in_flight)
    assert status.state == ModelState.READY
    assert sorted(fleet.helper.running) == ["recent"] and sorted(fleet.main.running) == ["big"]
    [(victim, data)] = fleet.evictions()
    assert victim == "old" and data["for_model"] == "big" and data["node"] == HELPER
    assert data["freed_bytes"] == 30 * GiB and data["needed_bytes"] == 38 * GiB
    assert "helper node 'helper-box'" in data["reason"] and "make room for 'big' across nodes" in data["reason"]
    assert fleet.orch.status_by_id("old").evicted == data["reason"]
    (server,) = fleet.helper.servers.values()
    assert server.memory_bytes == 38 * GiB  # the grant lends what was made room for


async def test_a_pinned_model_on_the_helper_blocks_and_nothing_is_unloaded_on_the_main(tmp_path: Path) -> None:
    fleet = await Split(tmp_path).open()
    fleet.memory(MAIN, total=16 * GiB, available=15 * GiB)
    await fleet.add("idle-main", MAIN, 14)  # the main's 2 GiB share would need it gone
    await fleet.add("keeper", HELPER, 50, pinned=True)
    await fleet.add("big", MAIN, rpc_nodes=[HELPER])
    await fleet.load("idle-main", "keeper")
    with pytest.raises(OrchestratorError) as refused:
        await fleet.orch.ensure_ready("big", fleet.in_flight)
    assert (refused.value.status, refused.value.code) == (503, "insufficient_memory")
    message = refused.value.message
    assert "Not enough memory on helper node 'helper-box' for 'big' (across nodes)" in message
    assert "needs 38.00 GiB, 13.00 GiB free" in message and "keeper (50.00 GiB, pinned)" in message
    assert fleet.evictions() == []
    assert sorted(fleet.main.running) == ["idle-main"] and sorted(fleet.helper.running) == ["keeper"]
    assert fleet.helper.servers == {}  # no rpc-server started for it either


async def test_a_split_model_unloaded_frees_its_part_on_each_node_counted_once(tmp_path: Path) -> None:
    fleet = await Split(tmp_path).open()
    fleet.memory(MAIN, total=16 * GiB, available=12 * GiB)
    await fleet.add("spare", HELPER, 10)
    await fleet.add("old-split", MAIN, 2, rpc_nodes=[HELPER])  # 2 GiB on the main, 38 lent by the helper
    await fleet.add("big", MAIN, 12, rpc_nodes=[HELPER])
    await fleet.load("spare", "old-split")
    # main: 11 GiB room for 12; helper: 63 - 10 - 38 = 15 GiB room for 38. Unloading "old-split"
    # frees 2 GiB on the main and its 38 GiB grant on the helper: "spare" need not go.
    assert (await fleet.orch.ensure_ready("big", fleet.in_flight)).state == ModelState.READY
    [(victim, data)] = fleet.evictions()
    assert victim == "old-split" and data["node"] == MAIN and "main node" in data["reason"]
    assert data["freed_by_node"] == {MAIN: 2 * GiB, HELPER: 38 * GiB}
    assert sorted(fleet.helper.running) == ["spare"] and sorted(fleet.main.running) == ["big"]
    assert [s.grant_id.rsplit("-", 1)[0] for s in fleet.helper.servers.values()] == ["big"]  # its server stopped


async def test_a_busy_split_model_on_a_helper_is_kept(tmp_path: Path) -> None:
    fleet = await Split(tmp_path).open()
    fleet.busy = {}
    await fleet.add("old-split", MAIN, 2, rpc_nodes=[HELPER])
    await fleet.add("local-big", HELPER, 40)  # on the helper alone: 63 - 38 = 25 GiB room there
    await fleet.load("old-split")
    fleet.busy["old-split"] = 2
    with pytest.raises(OrchestratorError, match=r"old-split \(38.00 GiB, 2 requests in flight\)"):
        await fleet.orch.ensure_ready("local-big", fleet.in_flight)
    fleet.busy.clear()
    assert (await fleet.orch.ensure_ready("local-big", fleet.in_flight)).state == ModelState.READY
    assert [v for v, _ in fleet.evictions()] == ["old-split"] and fleet.helper.servers == {}


async def test_a_helper_refusing_its_grant_for_memory_gets_room_made_and_the_grant_is_asked_again(
        tmp_path: Path) -> None:
    fleet = await Split(tmp_path).open()
    await fleet.add("old", HELPER, 10)
    await fleet.add("big", MAIN, rpc_nodes=[HELPER])
    await fleet.load("old")
    # by its (stale) sample the helper has room; its agent finds 8 GiB missing for the 38 GiB grant
    fleet.helper.rpc_refusals.append(AgentError(409, "insufficient_memory", "this node has 30.0 GiB free",
                                                {"free_bytes": 30 * GiB, "wanted_bytes": 38 * GiB}))
    assert (await fleet.orch.ensure_ready("big", fleet.in_flight)).state == ModelState.READY
    [(victim, data)] = fleet.evictions()
    assert victim == "old" and data["node"] == HELPER and "8.00 GiB needed there" in data["reason"]
    assert len(fleet.helper.servers) == 1 and fleet.helper.running == {}


async def test_a_user_start_of_a_split_model_never_unloads_anything(tmp_path: Path) -> None:
    fleet = await Split(tmp_path).open()
    await fleet.add("old", HELPER, 10)
    await fleet.add("big", MAIN, rpc_nodes=[HELPER])
    await fleet.load("old")
    fleet.helper.rpc_refusals.append(AgentError(409, "insufficient_memory", "this node has 30.0 GiB free",
                                                {"free_bytes": 30 * GiB, "wanted_bytes": 38 * GiB}))
    with pytest.raises(DaemonProblem) as refused:
        await fleet.orch.start("big")
    assert refused.value.code == "insufficient_memory" and "helper node 'helper-box'" in refused.value.message
    assert fleet.evictions() == [] and sorted(fleet.helper.running) == ["old"] and fleet.main.specs == []


def test_the_helpers_share_is_cut_as_llama_cpp_cuts_it() -> None:
    assert helper_shares(40 * GiB, LlamaCppSettings(), 2) == [20 * GiB, 20 * GiB]
    assert helper_shares(40 * GiB, LlamaCppSettings(tensor_split="3,1"), 2) == [30 * GiB, 10 * GiB]
    # with --device the node's own GPUs come first, then the RPC devices
    assert helper_shares(30 * GiB, LlamaCppSettings(gpus=[0], tensor_split="4,1,2"), 2) == [10 * GiB, 20 * GiB]
    assert helper_shares(10, LlamaCppSettings(), 3) == [4, 3, 3]
