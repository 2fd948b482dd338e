"""Telemetry pieces that need no runtime: Prometheus text, rates, the GPU probe."""

from __future__ import annotations

from agent.api.models import GpuInfo
from agent.gpu import NvmlProbe
from agent.telemetry import parse_prometheus
from tests.fakes import FakeNvml

LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
llamacpp:tokens_predicted_total 56
llamacpp:requests_processing 2
llamacpp:kv_cache_usage_ratio 0.25
labelled{slot="0"} 9
"""


def test_prometheus_text_to_values() -> None:
    assert parse_prometheus(LLAMACPP_METRICS) == {
        "llamacpp:prompt_tokens_total": 1234.0, "llamacpp:tokens_predicted_total": 56.0,
        "llamacpp:requests_processing": 2.0, "llamacpp:kv_cache_usage_ratio": 0.25}


def test_nvml_probe_reads_what_the_gpu_reports() -> None:
    assert NvmlProbe(FakeNvml()).sample() == [GpuInfo(
        index=0, name="Fake GPU 24GB", uuid="GPU-fake-0", memory_total=24 << 30, memory_used=3 << 30,
        utilization_percent=37.0, temperature_c=51.0, power_w=None)]


def test_no_nvidia_driver_means_no_gpus() -> None:
    probe = NvmlProbe(FakeNvml(fail_init=True))
    assert probe.sample() == [] and probe.sample() == []
    assert isinstance(NvmlProbe().sample(), list)  # the real pynvml on this machine: never raises
