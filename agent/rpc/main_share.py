"""What the main node of a model across nodes keeps itself (llama.cpp RPC): admission's figure.

llama.cpp treats each helper's RPC device like a GPU: ``--n-gpu-layers N`` offloads the last N
layers (the output head too when N is above the layer count) to the devices, with their KV cache
and compute buffers, shared by ``--tensor-split`` or, without one, by each device's free memory.
The devices' order is llama.cpp's: the RPC devices first, then this node's GPUs; with ``--device``
(``settings.gpus``) the order given there, which ``build_args`` writes as this node's GPUs, then
``RPC0..``. So the main holds the first layers' weights and KV cache, the embeddings, the tables
and a small compute buffer in system memory (``estimate``'s host part), and its own GPUs their
share of the offloaded layers. The helpers' parts are not the main's to judge: each helper's
rpc-server holds its own memory.

``n_gpu_layers`` unset (llama.cpp's auto) or negative counts as every layer offloaded. Without a
``--tensor-split`` a main with GPUs cannot know its GPUs' share (it depends on the helpers' free
memory, reported to llama-server only once it connects), so only system memory is held then.
Pure functions, asserted exactly by ``tests/agent/test_rpc_main_share.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import GgufSummary, MemoryEstimate
from agent.memory_estimate import CELL_PAD, DEFAULT_CTX, MAX_CTX, estimate


@dataclass(frozen=True)
class MainShare:
    """The main node's part: ``estimate`` holds its host bytes and its own GPUs' bytes
    (``gpu_bytes``, one per local GPU, empty when ``gpus_known`` is False); ``remote_bytes``
    is what goes to the helpers' devices."""

    estimate: MemoryEstimate
    remote_bytes: int
    gpus_known: bool


def offloaded_layers(summary: GgufSummary, settings: LlamaCppSettings) -> int:
    """The layer count ``--n-gpu-layers`` offloads with RPC devices present (unset/negative: all + head)."""
    ngl = settings.n_gpu_layers
    return summary.block_count + 1 if ngl is None or ngl < 0 else ngl


def device_shares(settings: LlamaCppSettings, rpc_devices: int, local_gpus: int) -> tuple[list[int], tuple[float, ...]]:
    """Positions of this node's GPUs in llama.cpp's device list, and each device's share of the
    offloaded layers (``()``: unknown, no ``--tensor-split`` with GPUs of its own)."""
    count = rpc_devices + local_gpus
    local = list(range(local_gpus)) if settings.gpus is not None else list(range(rpc_devices, count))
    if settings.split_mode == "none":
        main = min(settings.main_gpu or 0, count - 1)
        return local, tuple(1.0 if i == main else 0.0 for i in range(count))
    split = [max(float(v), 0.0) for v in (settings.tensor_split or "").split(",") if v.strip()][:count]
    if any(s > 0 for s in split):
        return local, tuple(split + [0.0] * (count - len(split)))
    if not local_gpus:
        return local, (1.0,) * count  # all offloaded layers are remote: how they share does not matter here
    return local, ()


def main_share(summary: GgufSummary, settings: LlamaCppSettings, rpc_devices: int,
               local_gpus: int = 0) -> MainShare:
    """What this node holds of a model whose RPC devices (``rpc_devices`` of them, in all) take
    the offloaded layers with its own ``local_gpus`` GPUs (those it is placed on)."""
    local, shares = device_shares(settings, rpc_devices, local_gpus)
    known = bool(shares)
    est = estimate(summary, settings, offloaded_layers(summary, settings),
                   shares or (1.0,) * (rpc_devices + local_gpus))
    device_bytes = est.gpu_bytes or [0] * (rpc_devices + local_gpus)
    mine = [device_bytes[i] for i in local] if known else []
    remote = sum(b for i, b in enumerate(device_bytes) if i not in local) if known else \
        sum(device_bytes)  # its GPUs' part unknown: counted with the helpers'
    return MainShare(estimate=est.model_copy(update={"gpu_bytes": mine, "total_bytes": est.host_bytes + sum(mine)}),
                     remote_bytes=remote, gpus_known=known)


def share_fits(share: MainShare, host: int, gpus: Sequence[int]) -> bool:
    return share.estimate.host_bytes <= host and all(
        need <= have for need, have in zip(share.estimate.gpu_bytes, gpus, strict=False))


def max_main_ctx(summary: GgufSummary, settings: LlamaCppSettings, rpc_devices: int, host: int,
                 gpus: Sequence[int] = ()) -> int:
    """Largest total context (a multiple of 256) whose main share fits; 0: none."""
    slots = settings.parallel or 1
    low, high = 0, min(MAX_CTX, (summary.context_length or DEFAULT_CTX) * slots) // CELL_PAD
    while low < high:
        mid = (low + high + 1) // 2
        trial = settings.model_copy(update={"ctx_size": mid * CELL_PAD})
        if share_fits(main_share(summary, trial, rpc_devices, len(gpus)), host, gpus):
            low = mid
        else:
            high = mid - 1
    return low * CELL_PAD
