"""Admission on a real agent (mTLS, real client): refusals carry the numbers and spawn nothing."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.admission import AdmissionPolicy
from agent.api.client import AgentError
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import GpuInfo, InstanceState
from agent.api.sources import FitRequest
from tests.agent._sources_support import processes_running, sources_agent
from tests.agent._support import make_spec
from tests.fakes import FakeGpuProbe
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf

# Metadata of a 32-layer model with 32 KV heads (16 GiB of KV cache at 32K context), tiny tensors.
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}


async def _refusal(call: object) -> AgentError:
    with pytest.raises(AgentError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_a_start_that_does_not_fit_is_refused_with_the_numbers(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    memory = FakeMemoryProbe(total=16 * GiB, available=12 * GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, memory_probe=memory) as agent:
        error = await _refusal(agent.client.start(make_spec(model, "big")))
        assert (error.status, error.code) == (409, "insufficient_memory")
        assert error.details["available_bytes"] == 12 * GiB and error.details["reserve_bytes"] == GiB
        assert error.details["needed_bytes"] > 16 * GiB
        assert 0 < error.details["max_ctx_size"] < 32768
        assert "GiB" in error.message and "reserve" in error.message and "force" in error.message
        assert processes_running(model) == [] and agent.deps.manager.runs() == {}

        smaller = make_spec(model, "big", settings=LlamaCppSettings(ctx_size=error.details["max_ctx_size"]))
        assert (await agent.client.start(smaller)).state is InstanceState.STARTING
        await agent.client.stop("big", timeout=5)

        forced = await agent.client.start(make_spec(model, "big", force=True))
        assert forced.state is InstanceState.STARTING
        assert await agent.state("big", InstanceState.READY) is InstanceState.READY


async def test_will_it_fit_answers_for_a_local_file(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    memory = FakeMemoryProbe(total=16 * GiB, available=12 * GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, memory_probe=memory) as agent:
        report = await agent.client.fit(FitRequest(model_path=str(model)))
        assert report.fits is False and report.summary.block_count == 32
        assert report.estimate.kv_cache_bytes == 16 * GiB and report.max_gpu_layers is None
        again = await agent.client.fit(FitRequest(model_path=str(model),
                                                  settings=LlamaCppSettings(ctx_size=report.max_ctx_size)))
        assert again.fits is True and again.estimate.host_bytes <= 11 * GiB


async def test_discrete_gpus_have_their_own_budget(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    gpu = GpuInfo(index=0, name="Fake RTX 8GB", memory_total=8 * GiB, memory_used=GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, gpu_probe=FakeGpuProbe([gpu]),
                             memory_probe=FakeMemoryProbe(total=256 * GiB, available=200 * GiB)) as agent:
        all_layers = LlamaCppSettings(ctx_size=32768, n_gpu_layers=-1)
        error = await _refusal(agent.client.start(make_spec(model, "big", settings=all_layers)))
        assert error.code == "insufficient_memory" and "GPU 0 needs" in error.message
        assert error.details["gpu_budget_bytes"] == [7 * GiB - 512 * 1024 * 1024]
        report = await agent.client.fit(FitRequest(model_path=str(model), settings=all_layers))
        assert report.gpus[0].needed_bytes > report.gpus[0].budget_bytes and 0 < report.max_gpu_layers < 33
        auto = await agent.client.start(make_spec(model, "big", settings=LlamaCppSettings(ctx_size=32768)))
        assert auto.state is InstanceState.STARTING  # unset layers: as many as fit, the rest on the CPU


async def test_a_malformed_or_wrong_file_is_refused_before_a_spawn(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    broken = tmp_path / "models" / "broken.gguf"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    projector = write_gguf(tmp_path / "models" / "mmproj.gguf", arch="clip")
    async with sources_agent(tmp_path, fake_runtime(), port_base) as agent:
        error = await _refusal(agent.client.start(make_spec(broken, "broken")))
        assert (error.status, error.code) == (422, "invalid_model_file") and "tensor count" in error.message
        error = await _refusal(agent.client.start(make_spec(projector, "proj")))
        assert error.code == "invalid_model_file" and "projector" in error.message
        assert processes_running(broken) == processes_running(projector) == []


async def test_unified_memory_loads_one_model_at_a_time(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    first = write_gguf(tmp_path / "models" / "a.gguf")
    second = write_gguf(tmp_path / "models" / "b.gguf")
    slow = fake_runtime(load_seconds=1.5)
    policy = AdmissionPolicy(unified_memory=True, unified_wait_s=0)
    async with sources_agent(tmp_path, slow, port_base, admission_policy=policy) as agent:
        await agent.client.start(make_spec(first, "a"))
        error = await _refusal(agent.client.start(make_spec(second, "b")))
        assert (error.status, error.code) == (409, "start_in_progress")
        assert processes_running(second) == []
        agent.deps.manager.admission.policy.unified_wait_s = 60  # type: ignore[union-attr]
        await agent.client.start(make_spec(second, "b"))  # waits for a to finish loading
        assert (await agent.client.instance("a")).state is InstanceState.READY


async def test_hostile_arguments_are_refused_by_the_agent_and_nothing_runs(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "m" / "m.gguf")
    outside = tmp_path / "outside.jinja"
    outside.write_text("{{ secrets }}")
    (model.parent / "t.jinja").symlink_to(outside)  # passes a check by text, not one on disk
    async with sources_agent(tmp_path, fake_runtime(), port_base) as agent:
        for args, flag in [(["--trust-remote-code"], "--trust-remote-code"), (["--tools", "all"], "--tools"),
                           (["-ag"], "-ag"), (["--rpc", "1.2.3.4:50052"], "--rpc"), (["--host", "0.0.0.0"], "--host"),
                           (["--slot-save-path", "/"], "--slot-save-path"), (["--model=-oProxyCommand=x"], "--model"),
                           (["--chat-template-file", str(model.parent / "t.jinja")], "--chat-template-file")]:
            error = await _refusal(agent.client.start(make_spec(model, "m", extra_args=args)))
            assert (error.status, error.code) == (422, "spec_rejected") and flag in error.message, error.message
        assert processes_running(model) == [] and agent.deps.manager.runs() == {}


async def test_a_model_linked_out_of_the_models_folder_is_refused(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    real = write_gguf(tmp_path / "elsewhere" / "real.gguf")
    async with sources_agent(tmp_path, fake_runtime(), port_base) as agent:
        link = agent.models_dir / "evil.gguf"
        link.symlink_to(real)
        error = await _refusal(agent.client.start(make_spec(link, "evil")))
        assert error.code == "spec_rejected" and "leads out of the models folder" in error.message


async def test_the_runtime_environment_holds_only_what_is_allowed(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "m.gguf")
    async with sources_agent(tmp_path, fake_runtime(), port_base) as agent:
        for name in ("LD_PRELOAD", "PYTHONOPTIMIZE", "LLAMA_ARG_TOOLS", "VLLM_SERVER_DEV_MODE", "HF_ENDPOINT"):
            error = await _refusal(agent.client.start(make_spec(model, "m", env={name: "1"})))
            assert error.code == "spec_rejected" and name in error.message
        assert processes_running(model) == []
        info = await agent.client.start(make_spec(model, "m", env={"CUDA_VISIBLE_DEVICES": "0",
                                                                   "GGML_SCHED_MAX_COPIES": "1"}))
        await agent.state("m", InstanceState.READY)
        info = await agent.client.instance("m")
        raw = await asyncio.to_thread(Path(f"/proc/{info.pid}/environ").read_bytes)
        names = {item.split(b"=", 1)[0].decode() for item in raw.split(b"\0") if item}
        allowed = {"PATH", "HOME", "LANG", "TMPDIR", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "LLAMA_API_KEY",
                   "CUDA_VISIBLE_DEVICES", "GGML_SCHED_MAX_COPIES",
                   "PWD"}  # exported by the fake runtime's /bin/sh wrapper, not by the agent
        assert names <= allowed and {"CUDA_VISIBLE_DEVICES", "LLAMA_API_KEY"} <= names


async def test_a_fifo_is_not_read_as_a_model(tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    fifo = tmp_path / "models" / "fifo.gguf"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    async with sources_agent(tmp_path, fake_runtime(), port_base) as agent:
        error = await _refusal(agent.client.fit(FitRequest(model_path=str(fifo))))
        assert (error.status, error.code) == (422, "invalid_model_file") and "regular file" in error.message


async def test_memory_promised_to_a_model_still_loading_is_not_promised_twice(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    # 16K tokens of context: 8 GiB of KV cache each; 12 GiB available holds one of them, not two.
    first = write_gguf(tmp_path / "models" / "a.gguf", **BIG)
    second = write_gguf(tmp_path / "models" / "b.gguf", **BIG)
    half = LlamaCppSettings(ctx_size=16384)
    memory = FakeMemoryProbe(total=16 * GiB, available=12 * GiB)  # the load has not shown up in it yet
    async with sources_agent(tmp_path, fake_runtime(load_seconds=30, load_quiet=True), port_base,
                             memory_probe=memory) as agent:
        assert (await agent.client.start(make_spec(first, "a", settings=half))).state is InstanceState.STARTING
        error = await _refusal(agent.client.start(make_spec(second, "b", settings=half)))
        assert error.code == "insufficient_memory" and error.details["pending_bytes"] > 7 * GiB
        assert "promised to models still loading" in error.message
        await agent.client.stop("a", timeout=2)
        assert (await agent.client.start(make_spec(second, "b", settings=half))).state is InstanceState.STARTING
