"""The memory estimate as a pure function: exact figures, and llama-server's own for Gemma."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.api.llamacpp import LlamaCppSettings as S
from agent.api.sources import GgufSummary
from agent.gguf_facts import summarize
from agent.gguf_reader import read_header
from agent.memory_estimate import (
    Budget,
    MiB,
    compute_bytes,
    estimate,
    fits,
    kv_bytes,
    max_ctx_size,
    max_gpu_layers,
    overhead_bytes,
    run_shape,
)

MODEL = GgufSummary(
    architecture="llama", file_size=1000 * MiB, tensor_bytes=990 * MiB, tensor_count=40, block_count=4,
    context_length=8192, embedding_length=1024, feed_forward_length=4096, head_count=8,
    head_count_kv=[2, 2, 2, 2], key_length=128, value_length=128, vocab_size=1000,
    swa_layers=[False] * 4, layer_bytes=[200 * MiB] * 4, output_bytes=100 * MiB, embedding_bytes=90 * MiB)
SWA_MODEL = MODEL.model_copy(update={"sliding_window": 512, "swa_layers": [True, True, True, False]})
ACTIVATIONS = 512 * 4 * (3 * 4096 + 4 * 1024 + 2 * 8 * 128)


def test_kv_cache_is_cells_times_heads_times_widths_times_type() -> None:
    assert kv_bytes(MODEL, run_shape(MODEL, S(ctx_size=4096, parallel=2))) == [4 * MiB] * 4
    assert kv_bytes(MODEL, run_shape(MODEL, S(ctx_size=4096))) == [4 * MiB] * 4  # unified: the same cells
    q8 = run_shape(MODEL, S(ctx_size=4096, parallel=2, cache_type_k="q8_0", cache_type_v="q8_0"))
    assert kv_bytes(MODEL, q8) == [4096 * 2 * 128 * 2 * 34 // 32] * 4
    q4 = run_shape(MODEL, S(ctx_size=4096, parallel=2, cache_type_k="q4_0", cache_type_v="f16"))
    assert kv_bytes(MODEL, q4) == [int(4096 * 2 * 128 * (18 / 32 + 2))] * 4


def test_sliding_window_layers_keep_window_plus_ubatch_per_sequence() -> None:
    split = kv_bytes(SWA_MODEL, run_shape(SWA_MODEL, S(ctx_size=4096, parallel=2)))
    assert split == [2 * MiB] * 3 + [4 * MiB]  # 1024 cells for each of 2 sequences
    unified = kv_bytes(SWA_MODEL, run_shape(SWA_MODEL, S(ctx_size=4096)))
    assert unified == [int(2.5 * MiB)] * 3 + [4 * MiB]  # 512 x 4 slots + 512, in one cache


def test_compute_buffers_and_overhead() -> None:
    shape = run_shape(MODEL, S(ctx_size=4096, parallel=2))
    assert compute_bytes(MODEL, shape) == ACTIVATIONS + 512 * 2048 * 2
    no_fa = run_shape(MODEL, S(ctx_size=4096, parallel=2, flash_attn="off"))
    assert compute_bytes(MODEL, no_fa) == ACTIVATIONS + 512 * 2048 * 2 + 512 * 2048 * 8 * 4
    assert overhead_bytes(MODEL, shape) == 24 * MiB + 1000 * 56 + 2 * 1000 * 4


def test_host_only_estimate_is_the_sum_of_its_parts() -> None:
    est = estimate(MODEL, S(ctx_size=4096, parallel=2))
    parts = 1000 * MiB + 16 * MiB + ACTIVATIONS + 512 * 2048 * 2 + 24 * MiB + 1000 * 56 + 8000
    assert est.host_bytes == est.total_bytes == parts and est.gpu_bytes == []
    assert (est.ctx_size, est.parallel, est.n_gpu_layers) == (4096, 2, 0)


def test_offloaded_layers_move_to_the_gpus_in_proportion_to_their_free_memory() -> None:
    est = estimate(MODEL, S(ctx_size=4096, parallel=2), gpu_layers=2, gpu_shares=(3.0, 1.0))
    gpu = 400 * MiB + 8 * MiB + ACTIVATIONS + 512 * 2048 * 2
    assert est.gpu_bytes == [int(gpu * 0.75), int(gpu * 0.25)]
    assert est.host_bytes == 600 * MiB + 8 * MiB + 512 * 4 * 4 * 1024 + overhead_bytes(MODEL, run_shape(
        MODEL, S(ctx_size=4096, parallel=2)))
    everything = estimate(MODEL, S(ctx_size=4096, parallel=2), gpu_layers=5, gpu_shares=(1.0,))
    assert everything.n_gpu_layers == 5  # four layers and the output head
    assert everything.gpu_bytes[0] == 800 * MiB + 100 * MiB + 16 * MiB + ACTIVATIONS + 512 * 2048 * 2


def test_largest_context_and_layer_count_that_fit() -> None:
    budget = Budget(host=1080 * MiB)
    ctx = max_ctx_size(MODEL, S(parallel=1), budget, 0)
    assert ctx % 256 == 0 and 0 < ctx < 8192
    assert fits(estimate(MODEL, S(ctx_size=ctx, parallel=1)), budget)
    assert not fits(estimate(MODEL, S(ctx_size=ctx + 256, parallel=1)), budget)
    assert max_ctx_size(MODEL, S(parallel=1), Budget(host=100 * MiB), 0) == 0
    gpus = Budget(host=2000 * MiB, gpus=(500 * MiB,))
    layers = max_gpu_layers(MODEL, S(ctx_size=4096, parallel=1), gpus)
    assert layers == 2  # two 200 MiB layers, their KV and the compute buffer: 448 MiB; three would not fit
    assert max_gpu_layers(MODEL, S(ctx_size=4096), Budget(host=2000 * MiB)) == 0  # no GPU at all


@pytest.mark.parametrize(("ctx", "slots", "kv_mib"), [(2048, 1, 21.0), (8192, 4, 84.0), (32768, 4, 156.0),
                                                      (None, None, 133.5)])
def test_gemma_kv_cache_matches_what_llama_server_allocates(gemma_gguf: Path, ctx: int | None,
                                                             slots: int | None, kv_mib: float) -> None:
    """The KV figures llama-server logs for this model (``llama_kv_cache: size = ...``)."""
    summary = summarize(read_header(gemma_gguf))
    assert sum(kv_bytes(summary, run_shape(summary, S(ctx_size=ctx, parallel=slots)))) == kv_mib * MiB
