"""The main node of a model across nodes is held to its own share (llama.cpp RPC), not the whole model.

Exact figures of the pure function, then the agent's admission: a model that fits only split is
admitted on the main, and one whose main share does not fit is refused with that share's numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.admission import Admission, AdmissionPolicy
from agent.api.llamacpp import LlamaCppSettings as S
from agent.api.models import GpuInfo, LaunchSpec
from agent.api.rpc import RpcPeer
from agent.api.sources import GgufSummary
from agent.memory_estimate import MiB, estimate
from agent.problems import InsufficientMemory
from agent.rpc.main_share import main_share, max_main_ctx
from tests.fakes import FakeGpuProbe
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf

# 4 layers of 200 MiB, 100 MiB output head, 90 MiB embeddings; 4 MiB of KV per layer at 4096/2 slots.
MODEL = GgufSummary(
    architecture="llama", file_size=1000 * MiB, tensor_bytes=990 * MiB, tensor_count=40, block_count=4,
    context_length=8192, embedding_length=1024, feed_forward_length=4096, head_count=8,
    head_count_kv=[2, 2, 2, 2], key_length=128, value_length=128, vocab_size=1000,
    swa_layers=[False] * 4, layer_bytes=[200 * MiB] * 4, output_bytes=100 * MiB, embedding_bytes=90 * MiB)
OVERHEAD = 24 * MiB + 1000 * 56 + 2 * 1000 * 4  # tables + logits of 2 slots
COMPUTE = 512 * 4 * (3 * 4096 + 4 * 1024 + 2 * 8 * 128) + 512 * 2048 * 2  # 36 MiB activations + 2 MiB mask
HOST_COMPUTE = 512 * 4 * 4 * 1024  # what stays on the CPU once layers are offloaded: 8 MiB
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}  # 512 MiB KV a layer
PEER = RpcPeer(agent_url="https://192.0.2.7:7341", grant_id="big-0123456789ab", node_id="a" * 64)


def test_a_cpu_main_keeps_its_first_layers_their_kv_and_a_small_compute_buffer() -> None:
    settings = S(ctx_size=4096, parallel=2, n_gpu_layers=3)  # the last 3 of 4 layers on the helper
    share = main_share(MODEL, settings, rpc_devices=1)
    assert share.estimate.host_bytes == 400 * MiB + 4 * MiB + HOST_COMPUTE + OVERHEAD  # layer 0, its KV
    assert share.estimate.gpu_bytes == [] and share.gpus_known
    assert share.remote_bytes == 600 * MiB + 12 * MiB + COMPUTE
    whole = estimate(MODEL, S(ctx_size=4096, parallel=2))  # what the main was held to before
    assert whole.host_bytes == 1000 * MiB + 16 * MiB + COMPUTE + OVERHEAD
    everything = main_share(MODEL, S(ctx_size=4096, parallel=2), rpc_devices=2)  # unset: all and the head
    assert everything.estimate.host_bytes == 100 * MiB + HOST_COMPUTE + OVERHEAD  # embeddings and norms only


def test_a_main_with_a_gpu_holds_its_tensor_split_share_in_llama_cpps_device_order() -> None:
    # All layers and the head offloaded: 800 + 100 MiB weights, 16 MiB KV and the compute buffer.
    offloaded = 900 * MiB + 16 * MiB + COMPUTE
    rpc_first = main_share(MODEL, S(ctx_size=4096, parallel=2, n_gpu_layers=-1, tensor_split="2,1"), 1, 1)
    assert rpc_first.estimate.gpu_bytes == [int(offloaded / 3)]  # RPC0 first, then this node's GPU
    assert rpc_first.estimate.host_bytes == 100 * MiB + HOST_COMPUTE + OVERHEAD
    named = main_share(MODEL, S(ctx_size=4096, parallel=2, n_gpu_layers=-1, tensor_split="2,1", gpus=[0]), 1, 1)
    assert named.estimate.gpu_bytes == [int(offloaded * 2 / 3)]  # --device CUDA0,RPC0: its own GPU first
    unknown = main_share(MODEL, S(ctx_size=4096, parallel=2, n_gpu_layers=-1), 1, 1)
    assert not unknown.gpus_known and unknown.estimate.gpu_bytes == []  # shared by the helpers' free memory
    assert unknown.estimate.host_bytes == rpc_first.estimate.host_bytes


def test_the_largest_context_is_the_one_whose_main_share_fits() -> None:
    settings = S(parallel=2, n_gpu_layers=3)
    host = main_share(MODEL, S(ctx_size=4096, parallel=2, n_gpu_layers=3), 1).estimate.host_bytes
    ctx = max_main_ctx(MODEL, settings, 1, host)
    assert ctx >= 4096
    assert main_share(MODEL, settings.model_copy(update={"ctx_size": ctx}), 1).estimate.host_bytes <= host
    assert main_share(MODEL, settings.model_copy(update={"ctx_size": ctx + 256}), 1).estimate.host_bytes > host


async def _no_wait(_done: object, _timeout: float) -> bool:
    return True


def _admission(available: int) -> Admission:
    return Admission(AdmissionPolicy(unified_memory=False), FakeMemoryProbe(total=16 * GiB, available=available),
                     FakeGpuProbe([]))


async def test_a_model_that_fits_only_split_is_admitted_on_a_cpu_main(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "big.gguf", **BIG)  # 16 GiB of KV at 32K: more than the main has
    admission = _admission(12 * GiB)
    alone = LaunchSpec(instance_id="big", model_path=str(model), served_name="big",
                       settings=S(ctx_size=32768, n_gpu_layers=24))
    with pytest.raises(InsufficientMemory):
        await admission.admit(alone, list, _no_wait)
    split = alone.model_copy(update={"rpc_peers": [PEER]})  # the last 24 of 32 layers on the helper
    report = await admission.admit(split, list, _no_wait)
    assert report is not None and report.fits
    assert 4 * GiB < report.estimate.host_bytes < 4 * GiB + 256 * MiB  # 8 layers' KV and the small rest
    assert "the main node's share: 24 of 33 layers on 1 RPC device(s)" in report.message


async def test_a_main_share_that_does_not_fit_is_refused_with_its_numbers(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "big.gguf", **BIG)
    spec = LaunchSpec(instance_id="big", model_path=str(model), served_name="big",
                      settings=S(ctx_size=32768, n_gpu_layers=8), rpc_peers=[PEER])  # 24 layers stay: 12 GiB KV
    with pytest.raises(InsufficientMemory) as refused:
        await _admission(12 * GiB).admit(spec, list, _no_wait)
    details = refused.value.details
    assert 12 * GiB < details["needed_bytes"] < 12 * GiB + 256 * MiB
    assert 0 < details["max_ctx_size"] < 32768 and "main node's share" in refused.value.message
    smaller = spec.model_copy(update={"settings": S(ctx_size=details["max_ctx_size"], n_gpu_layers=8)})
    assert (await _admission(12 * GiB).admit(smaller, list, _no_wait)).fits  # type: ignore[union-attr]


async def test_the_main_gpus_share_is_held_to_their_budget(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "big.gguf", **BIG)
    gpu = GpuInfo(index=0, name="Fake RTX 8GB", memory_total=8 * GiB, memory_used=GiB)
    admission = Admission(AdmissionPolicy(unified_memory=False), FakeMemoryProbe(total=64 * GiB, available=60 * GiB),
                          FakeGpuProbe([gpu]))
    spec = LaunchSpec(instance_id="big", model_path=str(model), served_name="big", rpc_peers=[PEER],
                      settings=S(ctx_size=32768, n_gpu_layers=-1, tensor_split="1,1"))  # 8 GiB of KV on GPU 0
    with pytest.raises(InsufficientMemory) as refused:
        await admission.admit(spec, list, _no_wait)
    assert "GPU 0 needs" in refused.value.message
    assert refused.value.details["gpu_needed_bytes"][0] > 8 * GiB
    lighter = spec.model_copy(update={"settings": S(ctx_size=32768, n_gpu_layers=-1, tensor_split="3,1")})
    assert (await admission.admit(lighter, list, _no_wait)).fits  # type: ignore[union-attr]
