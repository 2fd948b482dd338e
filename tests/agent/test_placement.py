"""Placement as pure functions: the GPUs a start is held to, and every way a model runs on a node,
with fake GPU figures (exact figures come from ``agent.memory_estimate``, held to them here)."""

from __future__ import annotations

import pytest

from agent.api.llamacpp import LlamaCppSettings as S
from agent.api.sources import GgufSummary
from agent.memory_estimate import (
    Budget,
    GiB,
    MiB,
    estimate,
    max_ctx_size,
    max_gpu_layers,
)
from agent.placement import (
    PARTIAL_CTX,
    Device,
    NodeMemory,
    UnknownGpu,
    placed_gpus,
    placement_args,
    plan_node,
    proportions,
    rank,
)

# 4 layers of 200 MiB, a 100 MiB output head, 8K context: about 1 GiB of weights.
MODEL = GgufSummary(
    architecture="llama", file_size=1000 * MiB, tensor_bytes=990 * MiB, tensor_count=40, block_count=4,
    context_length=8192, embedding_length=1024, feed_forward_length=4096, head_count=8,
    head_count_kv=[2, 2, 2, 2], key_length=128, value_length=128, vocab_size=1000,
    swa_layers=[False] * 4, layer_bytes=[200 * MiB] * 4, output_bytes=100 * MiB, embedding_bytes=90 * MiB)
FULL = MODEL.block_count + 1
TWO_GPUS = NodeMemory(host_free=8 * GiB, host_capacity=30 * GiB,
                      gpus=(Device(0, "Fake A", free=2 * GiB, capacity=8 * GiB),
                            Device(1, "Fake B", free=300 * MiB, capacity=8 * GiB)))


def _by_kind(options: list, kind: str) -> list:
    return [o for o in options if o.kind == kind]


# --- placed_gpus: the GPUs a start is held to --------------------------------------------------

def test_unset_placement_uses_every_gpu_split_by_free_memory() -> None:
    assert placed_gpus(S(), [0, 1, 2]) == ([0, 1, 2], ())
    assert placed_gpus(S(), []) == ([], ())


def test_named_gpus_are_positions_in_the_nodes_list_in_the_order_given() -> None:
    assert placed_gpus(S(gpus=[2, 0]), [0, 1, 2]) == ([2, 0], ())
    assert placed_gpus(S(gpus=[3, 3]), [1, 3]) == ([1], ())  # a repeat counts once
    assert placed_gpus(S(gpus=[]), [0, 1]) == ([], ())  # --device none: the CPU only


def test_a_gpu_the_node_lacks_is_refused_with_the_nodes_gpus() -> None:
    with pytest.raises(UnknownGpu) as caught:
        placed_gpus(S(gpus=[0, 5]), [0, 1])
    assert caught.value.status == 422 and "GPU 5" in caught.value.message and "0, 1" in caught.value.message
    with pytest.raises(UnknownGpu, match="none"):
        placed_gpus(S(gpus=[0]), [])


def test_split_mode_none_holds_the_whole_model_to_the_main_gpu() -> None:
    assert placed_gpus(S(split_mode="none"), [0, 1]) == ([0], (1.0,))
    assert placed_gpus(S(split_mode="none", main_gpu=1), [0, 1]) == ([1], (1.0,))
    assert placed_gpus(S(gpus=[1, 0], split_mode="none", main_gpu=1), [0, 1]) == ([0], (1.0,))
    with pytest.raises(UnknownGpu, match="main_gpu 2"):
        placed_gpus(S(split_mode="none", main_gpu=2), [0, 1])


def test_a_tensor_split_is_padded_or_cut_to_the_gpus_and_ignored_when_all_zero() -> None:
    assert placed_gpus(S(tensor_split="3,1"), [0, 1]) == ([0, 1], (3.0, 1.0))
    assert placed_gpus(S(tensor_split="3"), [0, 1]) == ([0, 1], (3.0, 0.0))
    assert placed_gpus(S(tensor_split="1,2,3"), [0, 1]) == ([0, 1], (1.0, 2.0))
    assert placed_gpus(S(tensor_split="0,0"), [0, 1]) == ([0, 1], ())


def test_proportions_are_whole_percent_reduced() -> None:
    assert proportions([3 * GiB, GiB]) == ("3,1", (3.0, 1.0))
    assert proportions([GiB, GiB, GiB]) == ("1,1,1", (1.0, 1.0, 1.0))
    assert proportions([1000 * GiB, 1]) == ("100,1", (100.0, 1.0))  # each at least 1
    assert proportions([0, 0]) == ("1,1", (1.0, 1.0))


def test_placement_args_are_the_flags_llama_server_takes() -> None:
    assert placement_args(S(gpus=[0, 2], split_mode="layer", tensor_split="3,1", n_gpu_layers=5, ctx_size=4096)) == [
        "--device", "CUDA0,CUDA2", "--split-mode", "layer", "--tensor-split", "3,1", "--n-gpu-layers", "5",
        "--ctx-size", "4096"]
    assert placement_args(S(gpus=[], n_gpu_layers=0)) == ["--device", "none", "--n-gpu-layers", "0"]
    assert placement_args(S(threads=4)) == []


# --- plan_node: every way the model runs on a node ---------------------------------------------

def test_a_node_without_gpus_has_one_option_the_cpu() -> None:
    memory = NodeMemory(host_free=4 * GiB, host_capacity=14 * GiB)
    (cpu,) = plan_node(MODEL, S(n_gpu_layers=9), memory)
    assert (cpu.kind, cpu.state, cpu.gpus, cpu.n_gpu_layers) == ("cpu", "free", [], 0)
    assert cpu.ctx_size == cpu.max_ctx_size == 8192 and cpu.args == ["--ctx-size", "8192"]
    assert cpu.settings.n_gpu_layers is None and cpu.settings.gpus is None
    assert [d.device for d in cpu.devices] == ["cpu"] and cpu.devices[0].needed_bytes == cpu.estimate.host_bytes


def test_unified_memory_is_one_option_held_to_system_memory() -> None:
    memory = NodeMemory(host_free=4 * GiB, host_capacity=14 * GiB, unified=True,
                        gpus=(Device(0, "GB10", free=GiB, capacity=GiB),))
    (unified,) = plan_node(MODEL, S(), memory)
    assert (unified.kind, unified.state, unified.gpus) == ("unified", "free", [])
    assert unified.estimate.gpu_bytes == [] and unified.args == ["--ctx-size", "8192"]


def test_two_gpus_list_each_gpu_a_split_and_the_cpu_best_first() -> None:
    options = plan_node(MODEL, S(), TWO_GPUS)
    assert [(o.kind, o.gpus, o.state) for o in options] == [
        ("gpu", [0], "free"), ("split", [0, 1], "free"), ("cpu", [], "free"), ("gpu", [1], "needs_room")]
    assert options == sorted(options, key=rank)
    assert _by_kind(options, "partial") == []  # every layer fits: no partial offload to offer


def test_one_gpu_option_holds_every_layer_there_with_the_largest_context() -> None:
    gpu0 = plan_node(MODEL, S(), TWO_GPUS)[0]
    now = Budget(8 * GiB, (2 * GiB,), (1.0,))
    assert gpu0.label == "GPU 0 (Fake A)" and gpu0.n_gpu_layers == FULL
    assert gpu0.max_ctx_size == max_ctx_size(MODEL, S(n_gpu_layers=FULL), now, FULL) == 8192
    assert gpu0.settings.gpus == [0] and gpu0.settings.ctx_size == 8192
    assert gpu0.args == ["--device", "CUDA0", "--n-gpu-layers", str(FULL), "--ctx-size", "8192"]
    exact = estimate(MODEL, S(ctx_size=8192, n_gpu_layers=FULL, gpus=[0]), FULL, (1.0,))
    assert gpu0.estimate == exact
    assert [(d.device, d.needed_bytes, d.free_bytes, d.capacity_bytes) for d in gpu0.devices] == [
        ("cpu", exact.host_bytes, 8 * GiB, 30 * GiB), ("CUDA0", exact.gpu_bytes[0], 2 * GiB, 8 * GiB)]
    assert "free now" in gpu0.message


def test_a_gpu_too_full_now_needs_room_and_says_how_much() -> None:
    gpu1 = next(o for o in plan_node(MODEL, S(), TWO_GPUS) if o.gpus == [1])
    assert gpu1.state == "needs_room" and gpu1.max_ctx_size == 0 and gpu1.max_ctx_size_empty == 8192
    short = gpu1.devices[1].needed_bytes - 300 * MiB
    assert f"{short / GiB:.1f} GiB more on CUDA1" in gpu1.message


def test_the_split_shares_the_layers_by_free_memory() -> None:
    split = _by_kind(plan_node(MODEL, S(), TWO_GPUS), "split")[0]
    text, shares = proportions([2 * GiB, 300 * MiB])
    assert split.settings.tensor_split == text == "87,13" and split.settings.split_mode == "layer"
    assert split.args[:6] == ["--device", "CUDA0,CUDA1", "--split-mode", "layer", "--tensor-split", "87,13"]
    exact = estimate(MODEL, split.settings, FULL, shares)
    assert [d.needed_bytes for d in split.devices[1:]] == exact.gpu_bytes
    assert split.label == "GPUs 0,1 split by layers (87,13)"


def test_a_split_is_by_capacity_when_a_gpu_has_nothing_free() -> None:
    memory = NodeMemory(host_free=8 * GiB, host_capacity=30 * GiB,
                        gpus=(Device(0, "", free=0, capacity=6 * GiB), Device(1, "", free=GiB, capacity=2 * GiB)))
    split = _by_kind(plan_node(MODEL, S(), memory), "split")[0]
    assert split.settings.tensor_split == "3,1" and split.state == "needs_room"


def test_a_model_larger_than_the_gpu_is_partly_offloaded_with_the_layers_that_fit() -> None:
    memory = NodeMemory(host_free=8 * GiB, host_capacity=30 * GiB, gpus=(Device(0, "Small", free=500 * MiB,
                                                                                capacity=500 * MiB),))
    options = plan_node(MODEL, S(), memory)
    assert [(o.kind, o.state) for o in options] == [("partial", "free"), ("cpu", "free"), ("gpu", "too_big")]
    partial = options[0]
    layers = max_gpu_layers(MODEL, S(ctx_size=PARTIAL_CTX, gpus=[0]), Budget(8 * GiB, (500 * MiB,), (1.0,)))
    assert 0 < layers < FULL and partial.n_gpu_layers == layers == 2
    assert partial.label == f"2 of {FULL} layers on GPU 0, the rest on the CPU"
    assert partial.args == ["--device", "CUDA0", "--n-gpu-layers", "2", "--ctx-size", str(partial.ctx_size)]
    assert partial.devices[1].needed_bytes <= 500 * MiB
    assert "too big even with the devices empty" in options[2].message and "CUDA0 needs" in options[2].message


def test_a_partial_offload_that_fits_only_once_room_is_made_needs_room() -> None:
    memory = NodeMemory(host_free=8 * GiB, host_capacity=30 * GiB, gpus=(Device(0, "", free=10 * MiB,
                                                                                capacity=500 * MiB),))
    partial = _by_kind(plan_node(MODEL, S(), memory), "partial")[0]
    assert partial.state == "needs_room" and partial.n_gpu_layers == 2


def test_a_context_asked_judges_every_option_at_it() -> None:
    options = plan_node(MODEL, S(ctx_size=2048), TWO_GPUS)
    assert {o.ctx_size for o in options} == {2048} and {o.settings.ctx_size for o in options} == {2048}
    assert all(o.estimate.ctx_size == 2048 for o in options)
    assert {o.max_ctx_size_empty for o in options} == {8192}  # what would fit is still told


def test_too_big_everywhere_is_too_big_and_a_large_context_is_judged_too() -> None:
    tiny = NodeMemory(host_free=100 * MiB, host_capacity=200 * MiB)
    (cpu,) = plan_node(MODEL, S(), tiny)
    assert cpu.state == "too_big" and cpu.max_ctx_size == cpu.max_ctx_size_empty == 0
    assert cpu.ctx_size == 8192  # the figures are for the model's own context
    need = estimate(MODEL, S(ctx_size=8192, parallel=4)).host_bytes
    for free, state in ((need, "free"), (need - 1, "needs_room")):
        (asked,) = plan_node(MODEL, S(ctx_size=8192, parallel=4), NodeMemory(host_free=free, host_capacity=30 * GiB))
        assert asked.state == state and asked.devices[0].needed_bytes == need


def test_the_request_settings_are_kept_but_for_placement() -> None:
    asked = S(threads=6, cache_type_k="q8_0", gpus=[1], tensor_split="1,1", split_mode="row")
    options = plan_node(MODEL, asked, TWO_GPUS)
    assert all(o.settings.threads == 6 and o.settings.cache_type_k == "q8_0" for o in options)
    gpu0 = next(o for o in options if o.gpus == [0])
    assert (gpu0.settings.gpus, gpu0.settings.tensor_split, gpu0.settings.split_mode) == ([0], None, None)
