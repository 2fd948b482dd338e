"""How much memory a llama-server instance needs, worked out from its GGUF facts and settings.

Pure functions, asserted exactly by tests and checked against the real runtime by
``bench/admission_estimate.py``. The estimate is the sum of:

* weights: the model file, mapped and made resident (llama.cpp prefetches the mapping), plus the
  second copy the CPU backend makes of Q4_0/Q4_K/IQ4_NL tensors it repacks;
* KV cache, per layer: cells x KV heads x (key length x K-type bytes + value length x V-type
  bytes). With ``parallel`` unset llama-server runs 4 slots sharing one unified cache of
  ``ctx_size`` cells; with ``parallel`` set each of the N slots gets ``ctx_size / N`` cells. A layer
  with a sliding window keeps only ``window + ubatch`` cells per sequence (rounded up to 256);
* compute buffers (a documented approximation): ``ubatch x 4 B x (3 x FFN + 4 x embedding + 2 x
  query width)`` for activations, the attention mask (``ubatch x cells x 2 B``), and without flash
  attention the score matrix (``ubatch x cells x heads x 4 B``); plus the logits buffer of
  ``slots x vocabulary x 4 B``;
* a fixed runtime overhead: 24 MiB plus 56 bytes per vocabulary token (the tokenizer's tables).

Model folders (vLLM, MLX) have no GGUF header to read: their estimate is the weight files' size
(``*.safetensors``, ``*.bin``, ``*.npz``, ``*.gguf``) plus a margin, ``FOLDER_MARGIN_FRACTION`` of
it and at least ``FOLDER_MARGIN_MIN`` (a documented allowance, not a measurement: the KV cache of a
modest context, activations and the framework's own buffers). What vLLM takes on a GPU is what it
is told to take: ``--gpu-memory-utilization`` of each GPU's total (the model's memory budget as its
share, else vLLM's default ``VLLM_DEFAULT_GPU_SHARE``), so that, not the weights, is its estimate.

With layers offloaded to discrete GPUs the offloaded layers' weights and KV cache, the output
head (when every layer is offloaded) and the compute buffer move to the GPUs, shared in proportion
to their free memory as llama.cpp's default split does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import GgufSummary, MemoryEstimate

MiB = 1 << 20
GiB = 1 << 30
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
                    "q4_1": 20 / 32, "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}
DEFAULT_SLOTS = 4
DEFAULT_UBATCH = 512
DEFAULT_CTX = 4096  # when the file does not say
CELL_PAD = 256
BASE_OVERHEAD = 24 * MiB
PER_TOKEN_OVERHEAD = 56
MAX_CTX = 4_194_304
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".npz", ".gguf")
FOLDER_MARGIN_FRACTION = 0.2
FOLDER_MARGIN_MIN = GiB
VLLM_DEFAULT_GPU_SHARE = 0.9  # vLLM's --gpu-memory-utilization when it is not given
VLLM_CPU_KV_DEFAULT = 4 * GiB  # vLLM's VLLM_CPU_KVCACHE_SPACE default on a node without a GPU


def _pad(value: int, to: int = CELL_PAD) -> int:
    return -(-value // to) * to


@dataclass(frozen=True)
class RunShape:
    """The settings resolved the way llama-server resolves them."""

    ctx: int
    slots: int
    unified: bool
    ubatch: int
    k_bytes: float
    v_bytes: float
    flash_attn: bool


def run_shape(summary: GgufSummary, settings: LlamaCppSettings) -> RunShape:
    ctx = settings.ctx_size or summary.context_length or DEFAULT_CTX
    return RunShape(
        ctx=_pad(min(ctx, MAX_CTX)), slots=settings.parallel or DEFAULT_SLOTS,
        unified=settings.parallel is None, ubatch=min(settings.ubatch_size or DEFAULT_UBATCH,
                                                      settings.batch_size or 1 << 30),
        k_bytes=CACHE_TYPE_BYTES[settings.cache_type_k or "f16"],
        v_bytes=CACHE_TYPE_BYTES[settings.cache_type_v or "f16"],
        flash_attn=settings.flash_attn != "off")


def layer_cells(summary: GgufSummary, shape: RunShape) -> list[int]:
    """KV cells each layer holds, all sequences together."""
    per_seq = shape.ctx if shape.unified else max(CELL_PAD, _pad(shape.ctx // shape.slots))
    window = summary.sliding_window or 0
    cells = []
    for swa in summary.swa_layers or [False] * summary.block_count:
        if not swa:
            cells.append(shape.ctx if shape.unified else per_seq * shape.slots)
        elif shape.unified:
            cells.append(min(shape.ctx, _pad(window * shape.slots + shape.ubatch)))
        else:
            cells.append(min(per_seq, _pad(window + shape.ubatch)) * shape.slots)
    return cells


def kv_bytes(summary: GgufSummary, shape: RunShape) -> list[int]:
    """KV cache bytes of each layer."""
    key = summary.key_length or 0
    value = summary.value_length or 0
    heads = summary.head_count_kv or [0] * summary.block_count
    return [int(c * h * (key * shape.k_bytes + value * shape.v_bytes))
            for c, h in zip(layer_cells(summary, shape), heads, strict=False)]


def compute_bytes(summary: GgufSummary, shape: RunShape) -> int:
    embd = summary.embedding_length or 0
    ffn = summary.feed_forward_length or 4 * embd
    query = (summary.head_count or 0) * (summary.key_length or 0) or embd
    cells = shape.ctx if shape.unified else _pad(shape.ctx // shape.slots)
    activations = shape.ubatch * 4 * (3 * ffn + 4 * embd + 2 * query)
    mask = shape.ubatch * cells * 2
    scores = 0 if shape.flash_attn else shape.ubatch * cells * (summary.head_count or 1) * 4
    return activations + mask + scores


def overhead_bytes(summary: GgufSummary, shape: RunShape) -> int:
    vocab = summary.vocab_size or 0
    return BASE_OVERHEAD + vocab * PER_TOKEN_OVERHEAD + shape.slots * vocab * 4  # tables + logits


def estimate(summary: GgufSummary, settings: LlamaCppSettings, gpu_layers: int = 0,
             gpu_shares: Sequence[float] = ()) -> MemoryEstimate:
    """The estimate with ``gpu_layers`` offloaded to GPUs taking ``gpu_shares`` of it each."""
    shape = run_shape(summary, settings)
    n = summary.block_count
    offloaded = min(max(gpu_layers, 0), n) if gpu_shares else 0
    output_off = bool(gpu_shares) and gpu_layers > n
    on_gpu = set(range(n - offloaded, n))
    kv = kv_bytes(summary, shape)
    compute = compute_bytes(summary, shape)
    overhead = overhead_bytes(summary, shape)
    layer_gpu = sum(b for i, b in enumerate(summary.layer_bytes) if i in on_gpu)
    output_gpu = summary.output_bytes + (summary.embedding_bytes if summary.output_tied else 0)
    gpu = layer_gpu + (output_gpu if output_off else 0) + sum(b for i, b in enumerate(kv) if i in on_gpu)
    host_weights = summary.file_size - layer_gpu - (summary.output_bytes if output_off else 0)
    repack = summary.repack_bytes * (n - offloaded) // n if n else summary.repack_bytes
    host_kv = sum(b for i, b in enumerate(kv) if i not in on_gpu)
    if offloaded or output_off:
        gpu += compute
        host_compute = shape.ubatch * 4 * 4 * (summary.embedding_length or 0)
    else:
        host_compute = compute
    host = host_weights + repack + host_kv + host_compute + overhead
    shares = [s / sum(gpu_shares) for s in gpu_shares] if gpu and gpu_shares else []
    return MemoryEstimate(
        ctx_size=shape.ctx, parallel=shape.slots, n_gpu_layers=offloaded + (1 if output_off else 0),
        weights_bytes=summary.file_size + repack + (summary.embedding_bytes if output_off and summary.output_tied else 0),
        kv_cache_bytes=sum(kv), compute_bytes=compute if not offloaded else compute + host_compute,
        overhead_bytes=overhead, host_bytes=host, gpu_bytes=[int(gpu * s) for s in shares],
        total_bytes=host + gpu)


@dataclass(frozen=True)
class Budget:
    """Memory a start may use: system memory and each discrete GPU's, reserves taken off."""

    host: int
    gpus: tuple[int, ...] = ()
    split: tuple[float, ...] = ()  # a --tensor-split of these GPUs; unset: by their budgets

    @property
    def shares(self) -> tuple[float, ...]:
        if self.gpus and any(s > 0 for s in self.split):
            return tuple(max(s, 0.0) for s in self.split)
        return tuple(max(g, 0) for g in self.gpus) if any(g > 0 for g in self.gpus) else ()


def fits(est: MemoryEstimate, budget: Budget) -> bool:
    return est.host_bytes <= budget.host and all(
        need <= have for need, have in zip(est.gpu_bytes, budget.gpus, strict=False))


def resolve_gpu_layers(summary: GgufSummary, settings: LlamaCppSettings, budget: Budget) -> int:
    """The layer count a start offloads: as set (-1: all), or as many as fit when unset."""
    if not budget.shares:
        return 0
    if settings.n_gpu_layers is None:
        return max_gpu_layers(summary, settings, budget)
    return summary.block_count + 1 if settings.n_gpu_layers < 0 else settings.n_gpu_layers


def max_gpu_layers(summary: GgufSummary, settings: LlamaCppSettings, budget: Budget) -> int:
    """Most layers (the output head counting as one) that fit on the GPUs with these settings."""
    shares = budget.shares
    if not shares:
        return 0
    for layers in range(summary.block_count + 1, 0, -1):
        if fits(estimate(summary, settings, layers, shares), budget):
            return layers
    return 0


def max_ctx_size(summary: GgufSummary, settings: LlamaCppSettings, budget: Budget, gpu_layers: int) -> int:
    """Largest total context (a multiple of 256) that fits with the other settings kept; 0: none."""
    slots = settings.parallel or 1
    top = min(MAX_CTX, (summary.context_length or DEFAULT_CTX) * slots)
    low, high = 0, top // CELL_PAD
    while low < high:
        mid = (low + high + 1) // 2
        trial = settings.model_copy(update={"ctx_size": mid * CELL_PAD})
        if fits(estimate(summary, trial, gpu_layers, budget.shares), budget):
            low = mid
        else:
            high = mid - 1
    return low * CELL_PAD


def folder_margin(weights: int) -> int:
    """The allowance beside a model folder's weights (see the module text)."""
    return max(FOLDER_MARGIN_MIN, int(weights * FOLDER_MARGIN_FRACTION))


def folder_need(weights: int) -> int:
    """What a model folder's runtime (MLX; vLLM without a GPU) needs: its weights plus the margin."""
    return weights + folder_margin(weights)


def vllm_gpu_need(gpu_total: int, budget: int | None) -> int:
    """What vLLM takes of one GPU: the budget when set (it becomes --gpu-memory-utilization), else
    vLLM's default share of the GPU's total."""
    return budget if budget is not None else int(gpu_total * VLLM_DEFAULT_GPU_SHARE)


def vllm_weights_per_gpu(weights: int, tensor_parallel: int) -> int:
    """One GPU's part of the weights when they are split over ``tensor_parallel`` GPUs."""
    return -(-weights // max(1, tensor_parallel))
