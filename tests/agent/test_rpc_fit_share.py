"""The "will it fit" API asked for a model across nodes (``FitRequest.rpc_devices``) answers the
main node's share and what goes to the helpers, the figures the daemon makes room with on each node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import GpuInfo
from agent.api.sources import FitRequest
from agent.rpc.main_share import main_share
from tests.agent._sources_support import sources_agent
from tests.fakes import FakeGpuProbe
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf

BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}


async def test_asked_with_rpc_devices_the_fit_is_of_the_main_share_and_says_the_helpers_part(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    memory = FakeMemoryProbe(total=16 * GiB, available=12 * GiB)
    settings = LlamaCppSettings(ctx_size=32768, n_gpu_layers=24)  # the last 24 of 32 layers on the helpers
    async with sources_agent(tmp_path, fake_runtime(), port_base, memory_probe=memory) as agent:
        alone = await agent.client.fit(FitRequest(model_path=str(model), settings=settings))
        split = await agent.client.fit(FitRequest(model_path=str(model), settings=settings, rpc_devices=2))
    share = main_share(split.summary, settings, rpc_devices=2)
    assert alone.remote_bytes is None and split.estimate.host_bytes == share.estimate.host_bytes
    assert split.remote_bytes == share.remote_bytes and split.remote_bytes > 8 * GiB  # 24 layers' 12 GiB of KV
    assert split.estimate.host_bytes < alone.estimate.host_bytes and split.fits and not alone.fits


async def test_a_main_with_gpus_and_no_tensor_split_cannot_say_the_helpers_part(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    gpu = GpuInfo(index=0, name="Fake RTX 8GB", memory_total=8 * GiB, memory_used=GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, gpu_probe=FakeGpuProbe([gpu]),
                             memory_probe=FakeMemoryProbe(total=64 * GiB, available=60 * GiB)) as agent:
        unknown = await agent.client.fit(FitRequest(model_path=str(model), rpc_devices=1))
        known = await agent.client.fit(FitRequest(model_path=str(model), rpc_devices=1,
                                                  settings=LlamaCppSettings(tensor_split="1,1")))
    assert unknown.remote_bytes is None  # llama.cpp shares by free memory it learns only when it connects
    assert known.remote_bytes is not None and known.remote_bytes > 0
