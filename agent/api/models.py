"""Pydantic contracts spoken on ``/agent/v1``. New fields are additive, with defaults."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from agent.api.backends import BackendChoice, Offload
from agent.api.llamacpp import Adapter, LlamaCppSettings
from agent.api.mlx import MlxSettings
from agent.api.rpc import RpcPeer
from agent.api.runtimes import (
    HasRuntimeSettings,
    RuntimeId,
    RuntimeOffer,
    profile,
)
from agent.api.vllm import VllmSettings
from core.key_store import KeysAtRest

API_PREFIX = "/agent/v1"
INSTANCE_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"


class InstanceState(str, Enum):
    """Lifecycle of one runtime process, as its supervisor sees it."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    FAILED = "failed"


class LaunchSpec(HasRuntimeSettings, BaseModel):
    """Everything an agent needs to start one runtime instance."""

    instance_id: str = Field(pattern=INSTANCE_ID_PATTERN, description="The model id; one instance per id.")
    runtime: RuntimeId = "llamacpp"
    model_path: str = Field(min_length=1, description="The model on the agent's machine: a GGUF file (llama.cpp), "
                            "a model folder (vLLM, MLX).")
    served_name: str = Field(min_length=1, description="Name the runtime reports as its model alias.")
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings, description="llama.cpp's settings.")
    vllm: VllmSettings = Field(default_factory=VllmSettings, description="vLLM's settings (runtime vllm).")
    mlx: MlxSettings = Field(default_factory=MlxSettings, description="mlx_lm.server's settings (runtime mlx).")
    image: str | None = Field(default=None, description="vLLM: the container image (a tag or name@sha256:digest).")
    runtime_version: str | None = Field(
        default=None, description="The runtime version this model is pinned to; a node with another refuses it.")
    extra_args: list[str] = Field(default_factory=list, description="Checked against a denylist.")
    env: dict[str, str] = Field(default_factory=dict, description="Checked against an allowlist.")
    startup_timeout_s: float = Field(default=120.0, gt=0, description="Silence allowed while loading.")
    force: bool = Field(default=False, description="Start even when admission says it will not fit.")
    backend: BackendChoice = Field(default="auto", description="llama.cpp: the node's backend choice (the daemon "
                                   "keeps it per node): auto, or cuda, vulkan, cpu (agent.api.backends).")
    memory_budget_bytes: int | None = Field(
        default=None, gt=0, description="Memory admission reserves for this instance instead of its GGUF estimate.")
    tuning: bool = Field(default=False, description="A tuning candidate of a job (vLLM: a mirbadllm.tuning=1 "
                         "container, never counted as the model's own).")
    # LoRA adapters (llama.cpp): loaded unapplied, each applied per request by the daemon's router.
    adapters: list[Adapter] = Field(default_factory=list, max_length=16, description="llama.cpp: LoRA adapters, "
                                    "loaded unapplied in this order (their ids); each must be a GGUF LoRA for the "
                                    "model's architecture.")
    # One model across nodes (llama.cpp): each helper's rpc-server, reached through its agent's tunnel.
    rpc_peers: list[RpcPeer] = Field(default_factory=list, max_length=16, description="llama.cpp: helper nodes "
                                     "whose rpc-servers hold part of the model (agent.api.rpc); llama-server gets "
                                     "--rpc with a loopback forward to each, in this order.")

    @model_validator(mode="after")
    def _rpc_only_for_llamacpp(self) -> LaunchSpec:
        if self.rpc_peers and not profile(self.runtime).spreads_over_nodes:
            raise ValueError("rpc_peers: only a llama.cpp model runs across nodes")
        return self


class InstanceInfo(BaseModel):
    """One instance as reported by the agent."""

    instance_id: str
    state: InstanceState
    served_name: str = ""
    model_path: str = ""
    pid: int | None = None
    port: int | None = None
    endpoint: str | None = Field(default=None, description="http://127.0.0.1:PORT on the agent's host.")
    api_key: str | None = Field(default=None, description="Per-instance runtime key; only sent over mTLS.")
    started_at: float | None = None
    error: str | None = None
    last_log_lines: list[str] = Field(default_factory=list)
    config_hash: str | None = None
    argv: list[str] = Field(default_factory=list)
    adopted: bool = False
    exit_code: int | None = None
    stop_requested: bool = False
    backend: str | None = Field(default=None, description="llama.cpp: the backend it computes on: cpu, vulkan, "
                                "cuda, metal (agent.api.backends).")
    offload: Offload | None = Field(default=None, description="llama.cpp: layers on the GPU and buffers per "
                                    "device, from its load log, once it is ready.")


class InstancesPage(BaseModel):
    """Answer of the instances long-poll: every instance and the state version they belong to."""

    version: int
    instances: list[InstanceInfo]


class GpuProcess(BaseModel):
    """One process on one GPU, as the driver lists it."""

    pid: int
    memory_used: int | None = Field(default=None, description="Bytes; None where the driver does not say.")
    utilization_percent: float | None = Field(
        default=None, description="Its own SM use, else the GPU's when it is the only process on it.")


class GpuEcc(BaseModel):
    """ECC error counts of one GPU: volatile since the driver last loaded, aggregate over its life.
    A count the GPU does not report is None (absent), never 0."""

    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


class GpuInfo(BaseModel):
    index: int
    name: str
    uuid: str = ""
    memory_total: int = 0
    memory_used: int = 0
    utilization_percent: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    processes: list[GpuProcess] = Field(default_factory=list)
    ecc: GpuEcc | None = Field(default=None, description="None: ECC off or not reported by this GPU.")
    throttle_reasons: list[str] | None = Field(
        default=None, description="Why its clocks are held down now (agent.gpu.THROTTLE_REASONS names); "
        "[]: not held; None: not reported.")
    xid_events: int | None = Field(default=None, description="XID errors seen since the agent started; "
                                   "None: not watched (the driver cannot deliver them).")
    last_xid: int | None = Field(default=None, description="The code of the newest XID error, when any came.")
    compute_capability: str | None = Field(default=None, description="NVIDIA: the CUDA compute capability (8.9).")
    driver_version: str | None = Field(default=None, description="NVIDIA: the driver's version (580.95.05).")
    unified_memory: bool = Field(default=False, description="Apple silicon: memory_* is the system's memory.")
    working_set_limit: int | None = Field(
        default=None, description="Apple silicon: Metal's recommended working set (bytes), when readable.")


class AgentStatus(BaseModel):
    """What a node is and can do."""

    node_id: str
    hostname: str
    os: str
    arch: str
    version: str
    cpu_count: int
    memory_total: int
    memory_available: int
    gpus: list[GpuInfo] = Field(default_factory=list)
    runtimes: dict[str, str | None] = Field(default_factory=dict, description="runtime -> executable or None")
    runtime_offers: list[RuntimeOffer] = Field(default_factory=list, description="Each driver, honestly reported.")
    features: list[str] = Field(default_factory=list)
    keys_at_rest: KeysAtRest | None = Field(default=None, description="The agent key: in the keychain, or a "
                                            "0600 file with a warning (core.key_store).")
    rpc_server: str | None = Field(default=None, description="The ggml-rpc-server of its llama.cpp build: "
                                   "None when this node cannot lend memory to a model on another (agent.api.rpc).")


class InstanceSample(BaseModel):
    """One instance's figures at one telemetry tick."""

    rss_bytes: int | None = None
    cpu_percent: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    requests_processing: float | None = None
    requests_deferred: float | None = None
    kv_cache_usage_ratio: float | None = None
    slots_total: int | None = None
    slots_busy: int | None = None
    kv_cache_tokens: int | None = None
    kv_cache_capacity: int | None = None
    kv_source: Literal["metrics", "slots"] | None = Field(
        default=None, description="Where the KV-cache figures came from: /metrics, or summed over /slots.")
    gpu_memory_bytes: int | None = Field(default=None, description="This process's memory on all GPUs.")
    gpu_utilization_percent: float | None = Field(default=None, description="Mean over the GPUs it uses.")


class TelemetrySample(BaseModel):
    seq: int
    ts: float
    cpu_percent: float
    memory_total: int
    memory_used: int
    memory_available: int
    gpus: list[GpuInfo] = Field(default_factory=list)
    instances: dict[str, InstanceSample] = Field(default_factory=dict)
    disk_total: int | None = Field(default=None, description="Bytes of the disk holding the agent's models folder.")
    disk_free: int | None = Field(default=None, description="Bytes free there (None: could not be read).")


class TelemetryPage(BaseModel):
    next_seq: int
    samples: list[TelemetrySample]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] | None = Field(default=None, description="Figures behind a refusal (admission).")


class ErrorEnvelope(BaseModel):
    error: ErrorBody


# Files of an agent's identity, under ``{agent_home}/identity/``. The daemon writes the CA
# certificate (and, for its own local agent, the signed certificate) here; the key never leaves.
IDENTITY_KEY_FILE = "agent.key"
IDENTITY_CERT_FILE = "agent.crt"
IDENTITY_CA_FILE = "ca.crt"
