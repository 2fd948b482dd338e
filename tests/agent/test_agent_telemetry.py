"""Telemetry: Prometheus text, the GPU probe and its per-process figures, KV-cache use from /slots,
and a real agent sampling a fake runtime."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.api.client import AgentClient
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import (
    GpuInfo,
    GpuProcess,
    InstanceSample,
    InstanceState,
    TelemetrySample,
)
from agent.deps import build_deps
from agent.gpu import NvmlProbe
from agent.identity import server_ssl_context
from agent.runtimes.llamacpp import kv_from_slots
from agent.runtimes.prometheus import parse_prometheus
from agent.server import create_app, start_server
from agent.telemetry import instance_gpu_figures
from daemon.telemetry import model_row
from tests.agent._support import eventually, issue_tls, make_spec
from tests.agent.test_agent_server import GPU, _until_state, start_agent  # noqa: F401 - the fixture
from tests.fakes import FakeGpuProbe, FakeNvml

LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
llamacpp:tokens_predicted_total 56
llamacpp:requests_processing 2
llamacpp:kv_cache_usage_ratio 0.25
labelled{slot="0"} 9
"""
MIB = 1 << 20


def test_prometheus_text_to_values() -> None:
    assert parse_prometheus(LLAMACPP_METRICS) == {
        "llamacpp:prompt_tokens_total": 1234.0, "llamacpp:tokens_predicted_total": 56.0,
        "llamacpp:requests_processing": 2.0, "llamacpp:kv_cache_usage_ratio": 0.25}


def test_nvml_probe_reads_what_the_gpu_reports() -> None:
    assert NvmlProbe(FakeNvml()).sample() == [GpuInfo(
        index=0, name="Fake GPU 24GB", uuid="GPU-fake-0", memory_total=24 << 30, memory_used=3 << 30,
        utilization_percent=37.0, temperature_c=51.0, power_w=None, compute_capability="8.9",
        driver_version="580.95.05")]
    assert NvmlProbe(FakeNvml()).driver_version() == "580.95.05"
    assert NvmlProbe(FakeNvml(fail_init=True)).driver_version() is None


def test_no_nvidia_driver_means_no_gpus() -> None:
    probe = NvmlProbe(FakeNvml(fail_init=True))
    assert probe.sample() == [] and probe.sample() == []


def test_the_real_driver_reports_the_gpus_nvidia_smi_lists() -> None:
    """The real pynvml on this machine: as many GPUs as ``nvidia-smi -L`` lists (none without one),
    each with a name and memory figures that add up."""
    gpus = NvmlProbe().sample()
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=True).stdout if smi else ""
    assert len(gpus) == sum(line.startswith("GPU ") for line in listed.splitlines())
    for gpu in gpus:
        assert gpu.name and gpu.uuid and 0 < gpu.memory_total and 0 <= gpu.memory_used <= gpu.memory_total
        assert all(p.pid > 0 for p in gpu.processes)


def test_each_process_gets_its_own_gpu_memory_and_utilisation() -> None:
    nvml = FakeNvml(compute=[(4242, 700 * MIB), (5151, 100 * MIB)], graphics=[(4242, 20 * MIB)],
                    process_util=[(4242, 1_000, 10), (4242, 2_000, 64), (5151, 2_000, 5)])
    probe = NvmlProbe(nvml)
    assert probe.sample()[0].processes == [
        GpuProcess(pid=4242, memory_used=720 * MIB, utilization_percent=64.0),  # newest sample wins
        GpuProcess(pid=5151, memory_used=100 * MIB, utilization_percent=5.0)]
    # The next read asks only for samples newer than those seen; none came: both were idle.
    assert [p.utilization_percent for p in probe.sample()[0].processes] == [0.0, 0.0]
    assert nvml.util_since == [0, 2_000]


def test_without_per_process_utilisation_the_only_process_gets_the_gpus() -> None:
    alone = NvmlProbe(FakeNvml(compute=[(4242, None)], process_util=FakeNvml.NOT_SUPPORTED)).sample()[0]
    assert alone.processes == [GpuProcess(pid=4242, memory_used=None, utilization_percent=37.0)]
    shared = NvmlProbe(FakeNvml(compute=[(4242, MIB), (5151, MIB)])).sample()[0]
    assert [p.utilization_percent for p in shared.processes] == [None, None], "the load is not split by guess"


def test_an_instance_sums_its_memory_over_gpus_and_averages_its_load() -> None:
    def gpu(index: int, *procs: GpuProcess) -> GpuInfo:
        return GpuInfo(index=index, name="g", processes=list(procs))

    gpus = [gpu(0, GpuProcess(pid=7, memory_used=3 * MIB, utilization_percent=80.0),
                GpuProcess(pid=8, memory_used=MIB, utilization_percent=1.0)),
            gpu(1, GpuProcess(pid=7, memory_used=2 * MIB, utilization_percent=40.0))]
    assert instance_gpu_figures(7, gpus) == (5 * MIB, 60.0)
    assert instance_gpu_figures(9, gpus) == (None, None)


def test_kv_cache_use_from_the_slots_of_todays_llama_server() -> None:
    # /slots of today's llama-server (-c 4096 -np 2), whose /metrics has no kv_cache_* gauge: a slot
    # that served a task reports the tokens its sequence holds as n_prompt_tokens.
    slots = [{"id": 0, "n_ctx": 2048, "is_processing": True, "id_task": 3, "n_prompt_tokens": 512},
             {"id": 1, "n_ctx": 2048, "is_processing": False}]
    assert kv_from_slots(slots, ctx_size=4096) == {
        "kv_cache_tokens": 512, "kv_cache_capacity": 4096, "kv_cache_usage_ratio": 0.125}
    # A unified cache: every slot may use the whole context, which is counted once.
    unified = [{"id": i, "n_ctx": 4096, "n_prompt_tokens": 1024} for i in range(4)]
    assert kv_from_slots(unified, ctx_size=4096)["kv_cache_usage_ratio"] == 1.0
    assert kv_from_slots([{"id": 0}], ctx_size=None) == {}, "slots that do not say: no figure"


def test_the_daemon_records_the_instance_gpu_figures() -> None:
    sample = TelemetrySample(seq=1, ts=1.0, cpu_percent=1.0, memory_total=1, memory_used=1, memory_available=0,
                             instances={"m": InstanceSample(gpu_memory_bytes=512 * MIB, gpu_utilization_percent=42.0,
                                                            kv_cache_usage_ratio=0.5, kv_source="slots")})
    row = model_row(sample, "m")
    assert (row["gpu_mem_bytes"], row["gpu_util_percent"], row["kv_cache_ratio"]) == (512 * MIB, 42.0, 0.5)


async def _sample_with(client: AgentClient, predicate: Callable[[InstanceSample], bool]) -> TelemetrySample | None:
    page = await client.telemetry(since=0)
    return next((s for s in reversed(page.samples) if "m" in s.instances and predicate(s.instances["m"])), None)


async def test_a_runtime_gets_its_own_gpu_figures_and_kv_use_from_its_slots(
        start_agent, fake_runtime: Callable[..., Path], model_file: Path) -> None:  # noqa: F811
    agent = await start_agent(fake_runtime(tokens=5))
    client: AgentClient = agent.client
    await client.start(make_spec(model_file))
    info = await _until_state(client, "m", InstanceState.READY)
    # The GPU lists the runtime's PID (and another program's, which is not the runtime's).
    agent.deps.gpu_probe.gpus = [GPU.model_copy(update={"processes": [
        GpuProcess(pid=info.pid, memory_used=900 * MIB, utilization_percent=55.0),
        GpuProcess(pid=1, memory_used=4096 * MIB, utilization_percent=30.0)]})]
    sample = await eventually(lambda: _sample_with(client, lambda i: i.gpu_memory_bytes is not None),
                              what="a sample with the runtime's GPU memory")
    assert (sample.instances["m"].gpu_memory_bytes, sample.instances["m"].gpu_utilization_percent) == (900 * MIB, 55.0)

    async with client.session.post(client.proxy_url("m", "/v1/completions"), json={"prompt": "a b c"}) as resp:
        assert resp.status == 200
    # 3 prompt tokens + 5 generated, less the last one (not decoded yet), held in one slot of 4096 cells.
    sample = await eventually(lambda: _sample_with(client, lambda i: i.kv_cache_tokens == 7), what="KV use")
    kv = sample.instances["m"]
    assert (kv.kv_source, kv.kv_cache_capacity) == ("slots", 4096)
    assert kv.kv_cache_usage_ratio == pytest.approx(7 / 4096)


async def test_an_older_runtime_kv_gauge_is_used_when_it_exports_one(
        start_agent, fake_runtime: Callable[..., Path], model_file: Path) -> None:  # noqa: F811
    agent = await start_agent(fake_runtime(tokens=5, legacy_metrics=True))
    client: AgentClient = agent.client
    await client.start(make_spec(model_file))
    await _until_state(client, "m", InstanceState.READY)
    async with client.session.post(client.proxy_url("m", "/v1/completions"), json={"prompt": "a b c"}) as resp:
        assert resp.status == 200
    sample = await eventually(lambda: _sample_with(client, lambda i: i.kv_cache_tokens == 7), what="KV use")
    assert (sample.instances["m"].kv_source, sample.instances["m"].kv_cache_usage_ratio) == ("metrics", 0.002)


@pytest.mark.e2e
async def test_the_real_llama_server_fills_the_kv_chart_from_its_slots(
        tmp_path: Path, gemma_gguf: Path, port_base: int, real_llama_server: Path) -> None:
    home = tmp_path / "agent"
    tls = issue_tls(tmp_path, home / "identity")
    deps = build_deps(home, llama_server=real_llama_server, gpu_probe=FakeGpuProbe(), first_port=port_base,
                      telemetry_interval_s=0.2)
    runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
    client = AgentClient(f"https://127.0.0.1:{port}", tls.client_context())
    try:
        spec = make_spec(gemma_gguf, "m", settings=LlamaCppSettings(ctx_size=1024, parallel=1, threads=2),
                         startup_timeout_s=120)
        await client.start(spec)
        info = await _until_state(client, "m", InstanceState.READY)
        assert info.state is InstanceState.READY, "\n".join(info.last_log_lines)
        body = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
        async with client.session.post(client.proxy_url("m", "/v1/completions"), json=body) as resp:
            assert resp.status == 200, await resp.text()
            usage = (await resp.json())["usage"]
        held = usage["prompt_tokens"] + usage["completion_tokens"] - 1  # the last token is not decoded
        sample = await eventually(lambda: _sample_with(client, lambda i: i.kv_cache_tokens == held),
                                  timeout=30, what=f"{held} tokens in the KV cache")
        kv = sample.instances["m"]
        assert (kv.kv_source, kv.kv_cache_capacity) == ("slots", 1024)
        assert kv.kv_cache_usage_ratio == pytest.approx(held / 1024)
    finally:
        for instance_id in list(deps.manager.runs()):
            await deps.manager.stop(instance_id, timeout=2)
        await client.close()
        await runner.cleanup()
