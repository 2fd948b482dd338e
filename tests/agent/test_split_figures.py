"""What a split across nodes is figured from (``agent.placement.split_figures``): each layer's
weights and KV cache at a ladder of contexts, and what the main node keeps; the daemon cuts the
layers over the nodes (tests/daemon/test_plan.py)."""

from __future__ import annotations

from agent.api.llamacpp import LlamaCppSettings as S
from agent.api.sources import GgufSummary
from agent.memory_estimate import MiB, estimate
from agent.placement import split_contexts, split_figures

MODEL = GgufSummary(
    architecture="llama", file_size=1000 * MiB, tensor_bytes=990 * MiB, tensor_count=40, block_count=4,
    context_length=8192, embedding_length=1024, feed_forward_length=4096, head_count=8,
    head_count_kv=[2, 2, 2, 2], key_length=128, value_length=128, vocab_size=1000,
    swa_layers=[False] * 4, layer_bytes=[200 * MiB] * 4, output_bytes=100 * MiB, embedding_bytes=90 * MiB)


def test_the_ladder_doubles_up_to_the_native_context_or_is_the_context_asked() -> None:
    assert split_contexts(MODEL, S()) == [2048, 4096, 8192]
    assert split_contexts(MODEL, S(parallel=2)) == [2048, 4096, 8192, 16384]  # each slot its native context
    assert split_contexts(MODEL, S(ctx_size=3000)) == [3000]


def test_each_layer_is_its_weights_and_its_kv_cache_and_the_main_node_keeps_the_rest() -> None:
    figures = split_figures(MODEL, S(gpus=[0], n_gpu_layers=99))  # placement settings do not matter
    assert [f.ctx_size for f in figures] == [2048, 4096, 8192]
    # f16 KV: cells x 2 heads x (128 + 128) x 2 bytes = 1 KiB a cell per layer
    assert [f.layer_bytes for f in figures] == [[200 * MiB + c * 1024] * 4 for c in (2048, 4096, 8192)]
    whole = estimate(MODEL, S(ctx_size=4096))
    assert figures[1].main_bytes == whole.total_bytes - 4 * (200 * MiB + 4 * MiB)
    assert figures[1].main_bytes > MODEL.output_bytes + MODEL.embedding_bytes  # head, embeddings, buffers


def test_a_header_without_layer_sizes_gives_no_figures() -> None:
    assert split_figures(MODEL.model_copy(update={"layer_bytes": []}), S()) == []
