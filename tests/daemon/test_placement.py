"""The room planner (daemon.models.placement): what to unload for a model that does not fit, or why nothing can."""

from __future__ import annotations

import itertools

import pytest

from daemon.models.placement import (
    CLASS_RANK,
    Loaded,
    ModelClass,
    NodeMemory,
    NodeOption,
    choose_node,
    eviction_order,
    plan,
    room,
    shortfall_from_refusal,
)

GiB = 1 << 30
CLASSES: tuple[ModelClass, ...] = ("opportunistic", "standard", "critical")
# 16 GiB machine, 1 GiB reserve, plenty really free: the models' claims decide.
ROOMY = NodeMemory(total=16 * GiB, available=15 * GiB, reserve=GiB)


def loaded(model_id: str, gib: float | None, last_used: float, **fields: object) -> Loaded:
    size = None if gib is None else int(gib * GiB)
    return Loaded(model_id=model_id, size_bytes=size, last_used=last_used, **fields)  # type: ignore[arg-type]


def ids(models: tuple[Loaded, ...] | list[Loaded]) -> list[str]:
    return [m.model_id for m in models]


def test_room_is_the_smaller_of_what_is_free_and_what_is_unclaimed() -> None:
    models = [loaded("a", 4, 1), loaded("b", 5, 2)]
    assert room(ROOMY, models) == 16 * GiB - GiB - 9 * GiB  # claims bind
    busy_machine = NodeMemory(total=16 * GiB, available=3 * GiB, reserve=GiB)
    assert room(busy_machine, models) == 2 * GiB  # what the machine really has binds
    assert room(ROOMY, [loaded("x", None, 1)]) == 14 * GiB  # a size not known claims nothing
    assert room(NodeMemory(total=8 * GiB, available=8 * GiB), [loaded("a", 9, 1)]) < 0


def test_a_model_that_fits_unloads_nothing() -> None:
    found = plan(6 * GiB, ROOMY, [loaded("a", 4, 1), loaded("b", 5, 2)])
    assert found.fits and found.evict == () and found.room == 6 * GiB


def test_the_least_recently_used_goes_first_and_no_more_than_needed() -> None:
    models = [loaded("newest", 4, 30), loaded("oldest", 4, 10), loaded("middle", 4, 20)]
    found = plan(5 * GiB, ROOMY, models)  # room 3 GiB: one model of 4 GiB makes up the 2 missing
    assert found.fits and ids(found.evict) == ["oldest"] and found.freed == 4 * GiB
    found = plan(9 * GiB, ROOMY, models)  # 6 missing: two go, oldest first
    assert found.fits and ids(found.evict) == ["oldest", "middle"]
    found = plan(15 * GiB, ROOMY, models)
    assert found.fits and ids(found.evict) == ["oldest", "middle", "newest"]


def test_busy_and_pinned_models_are_kept_even_when_least_recently_used() -> None:
    models = [loaded("busy", 4, 1, in_flight=2), loaded("pinned", 4, 2, pinned=True), loaded("idle", 4, 3)]
    found = plan(5 * GiB, ROOMY, models)
    assert found.fits and ids(found.evict) == ["idle"]
    found = plan(9 * GiB, ROOMY, models)  # only "idle" may go, and 4 GiB does not make up 6
    assert not found.fits and found.evict == ()
    assert "busy (4.00 GiB, 2 requests in flight)" in found.reason
    assert "pinned (4.00 GiB, pinned)" in found.reason
    assert "idle (4.00 GiB)" in found.reason
    assert found.reason.startswith("needs 9.00 GiB, 3.00 GiB free")


def test_nothing_is_unloaded_in_vain() -> None:
    models = [loaded("a", 1, 1), loaded("b", 1, 2), loaded("big-busy", 10, 3, in_flight=1)]
    found = plan(8 * GiB, ROOMY, models)  # room 3, 5 missing, only 2 can be freed
    assert not found.fits and found.evict == ()


def test_a_model_of_unknown_size_is_never_counted_on() -> None:
    found = plan(16 * GiB, NodeMemory(total=32 * GiB, available=4 * GiB), [loaded("mystery", None, 1)])
    assert not found.fits and "mystery (size not known, size not known)" in found.reason


def test_classes_lowest_first_and_never_one_above_the_asker() -> None:
    models = [loaded("crit", 4, 1, model_class="critical"), loaded("std", 4, 2),
              loaded("opp", 4, 3, model_class="opportunistic")]
    # The opportunistic one goes first although it was used most recently.
    assert ids(eviction_order(models)) == ["opp", "std", "crit"]
    found = plan(5 * GiB, ROOMY, models, "standard")
    assert ids(found.evict) == ["opp"]
    found = plan(9 * GiB, ROOMY, models, "standard")
    assert ids(found.evict) == ["opp", "std"]
    found = plan(13 * GiB, ROOMY, models, "standard")  # only critical could make up the rest
    assert not found.fits and "crit (4.00 GiB, class critical, above standard)" in found.reason
    assert ids(plan(13 * GiB, ROOMY, models, "critical").evict) == ["opp", "std", "crit"]
    found = plan(9 * GiB, ROOMY, models[:2], "opportunistic")
    assert not found.fits  # an opportunistic model unloads only opportunistic ones


@pytest.mark.parametrize(("asker", "victim"), list(itertools.product(CLASSES, CLASSES)))
def test_every_pair_of_classes(asker: ModelClass, victim: ModelClass) -> None:
    found = plan(15 * GiB, ROOMY, [loaded("v", 4, 1, model_class=victim)], asker)
    may = CLASS_RANK[victim] <= CLASS_RANK[asker]
    assert found.fits is may and ids(found.evict) == (["v"] if may else [])


def test_with_the_agents_shortfall_the_plan_makes_up_that_much() -> None:
    models = [loaded("a", 1, 1), loaded("b", 2, 2)]
    found = plan(GiB, ROOMY, models, shortfall=2 * GiB)  # fits by our figures, not by the agent's
    assert found.fits and ids(found.evict) == ["a", "b"]


def test_an_empty_node_that_is_too_small_says_so() -> None:
    found = plan(32 * GiB, ROOMY, [])
    assert not found.fits and found.reason.endswith("no model is loaded on the node")


def test_the_shortfall_read_from_an_agents_refusal() -> None:
    details: dict[str, object] = {"needed_bytes": 6 * GiB, "available_bytes": 5 * GiB, "reserve_bytes": GiB,
                                  "pending_bytes": GiB, "gpu_needed_bytes": [], "gpu_budget_bytes": []}
    assert shortfall_from_refusal(details) == 3 * GiB
    details.update(gpu_needed_bytes=[8 * GiB, GiB], gpu_budget_bytes=[4 * GiB, 4 * GiB])
    assert shortfall_from_refusal(details) == 4 * GiB  # GPU 0 misses more than the host
    assert shortfall_from_refusal({"needed_bytes": GiB, "available_bytes": 4 * GiB}) is None
    assert shortfall_from_refusal(None) is None and shortfall_from_refusal({}) is None


def option(node_id: str, need_gib: float, loaded_gib: list[float], *, total_gib: float = 16,
           gpu_free_gib: float = 0) -> NodeOption:
    memory = NodeMemory(total=int(total_gib * GiB), available=int(total_gib * GiB))
    models = [loaded(f"{node_id}-{i}", size, i) for i, size in enumerate(loaded_gib)]
    return NodeOption(node_id, plan(int(need_gib * GiB), memory, models), gpu_free=int(gpu_free_gib * GiB))


def test_auto_prefers_a_gpu_with_room_then_the_least_eviction_then_the_most_room() -> None:
    cpu_roomy, gpu_roomy = option("cpu", 4, []), option("gpu", 4, [], gpu_free_gib=8)
    assert choose_node([cpu_roomy, gpu_roomy]).node_id == "gpu"  # type: ignore[union-attr]
    small_gpu = option("small-gpu", 4, [], gpu_free_gib=2)  # a GPU without room for it counts as none
    assert choose_node([small_gpu, option("more-room", 4, [], total_gib=32)]).node_id == "more-room"  # type: ignore[union-attr]
    full_gpu = option("full-gpu", 8, [10], gpu_free_gib=12)  # fits on its GPU only after an eviction
    assert choose_node([full_gpu, option("cpu", 8, [])]).node_id == "full-gpu"  # type: ignore[union-attr]
    a, b = option("a", 8, [4, 6]), option("b", 8, [2, 2, 4])  # a frees 4 GiB, b frees 2
    assert full_gpu.plan.evict and a.plan.freed == 4 * GiB and b.plan.freed == 2 * GiB
    assert choose_node([a, b]).node_id == "b"  # type: ignore[union-attr]
    assert choose_node([a, b], may_evict=False) is None
    assert choose_node([option("a", 40, []), option("b", 40, [])]) is None
    assert choose_node([]) is None
    assert choose_node([option("z", 4, []), option("y", 4, [])]).node_id == "y"  # type: ignore[union-attr]
