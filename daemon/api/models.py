"""Pydantic contracts of the daemon's admin API. Storage shapes live in the daemon, not here."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.api.backends import Offload
from agent.api.llamacpp import Adapter, LlamaCppSettings
from agent.api.mlx import MlxSettings
from agent.api.models import GpuInfo
from agent.api.runtimes import PROFILES, HasRuntimeSettings, RuntimeId
from agent.api.sources import SourceFile
from agent.api.vllm import VllmSettings
from core.key_store import KeysAtRest
from daemon.api.backup import BackupSettings
from daemon.api.rpc_split import RpcHelper

MODEL_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"
DEFAULT_PORT = 8484
LOCAL_NODE = "local"
AUTO_NODE = "auto"  # placed at each start on the node where the model fits best (daemon.models.placement)


class ModelState(str, Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    FAILED = "failed"


class KeptRevision(BaseModel):
    """The files a model ran before an update (daemon.sources.updates), kept on its node for a roll back."""

    model_config = ConfigDict(extra="forbid")

    revision: str | None = None
    hf_file: str | None = None
    files: list[SourceFile] = Field(default_factory=list)
    model_path: str
    projector_path: str | None = None
    replaced_at: float = 0.0


class ModelSource(BaseModel):
    """Where a model file came from, so it can be fetched again (and updated: daemon.sources.updates)."""

    model_config = ConfigDict(extra="forbid")

    hf_repo: str | None = None
    hf_file: str | None = None
    revision: str | None = Field(default=None, description="The hub's commit the files are of.")
    package: str | None = Field(default=None, description="Python package that ships the file.")
    files: list[SourceFile] = Field(default_factory=list, description="Each file fetched from the hub with its "
                                    "SHA-256 and size, as the hub listed them at ``revision``.")
    previous: KeptRevision | None = Field(default=None, description="The files before the last update, kept "
                                          "for `models rollback`.")


class Preset(BaseModel):
    """A model's defaults for the requests that do not set them (daemon.models.presets): a system
    prompt for chats without one, and sampling. None: the runtime's own default."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: str | None = Field(default=None, max_length=20_000, description="Put first in a chat that "
                                      "has no system message.")
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0, le=1000, description="0: off.")
    min_p: float | None = Field(default=None, ge=0, le=1)
    repeat_penalty: float | None = Field(default=None, gt=0, le=2, description="1: off.")
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000, description="The reply's length when a "
                                   "request does not say.")

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.__dict__.values())


class ModelDefinition(HasRuntimeSettings, BaseModel):
    """A model the user registered: what to run, where, and how."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=MODEL_ID_PATTERN, description="Stable id; lowercase letters, digits and '-'.")
    served_name: str = Field(min_length=1, max_length=128, description="The `model` clients send.")
    runtime: RuntimeId = "llamacpp"
    node: str = Field(default=LOCAL_NODE, description="Node id; 'local' for this machine; 'auto': at each start, "
                      "the node where it fits best (its file at the same path on each node).")
    model_path: str = Field(min_length=1, description="On the node: a GGUF file (llama.cpp), a model folder "
                            "(vLLM, MLX).")
    sources: ModelSource | None = None
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings, description="llama.cpp's settings.")
    vllm: VllmSettings = Field(default_factory=VllmSettings, description="vLLM's settings (runtime vllm).")
    mlx: MlxSettings = Field(default_factory=MlxSettings, description="mlx_lm.server's settings (runtime mlx).")
    image: str | None = Field(default=None, max_length=300,
                              description="vLLM: the container image (a tag or name@sha256:digest).")
    runtime_version: str | None = Field(
        default=None, max_length=200, description="Pin: the runtime version this model must run on (llama.cpp "
        "build, vLLM image digest, mlx-lm version); a node with another refuses to start it.")
    # External endpoints (runtime "external", ``daemon.models.external``) and fallbacks (any runtime).
    base_url: str | None = Field(default=None, max_length=500, description="external: the server's OpenAI "
                                 "base URL (http or https), e.g. https://api.openai.com/v1.")
    provider_model: str | None = Field(default=None, min_length=1, max_length=200, description="external: the "
                                       "model name the server knows; the router puts it in each request's `model`.")
    api_key_file: str | None = Field(default=None, max_length=1000, description="external: an absolute path on the "
                                     "daemon's machine to a file holding the key, read on every request; the key "
                                     "itself is never stored, shown or logged. None: send no key.")
    fallbacks: list[str] = Field(default_factory=list, max_length=8, description="Served names or ids of other "
                                 "models that answer in this one's place, in order, when it cannot: not ready and "
                                 "not loadable, no room, its node offline, its endpoint unreachable; never once an "
                                 "answer started.")

    @model_validator(mode="after")
    def _stall_outlasts_heartbeat(self) -> ModelDefinition:
        if self.stall_timeout_s <= self.heartbeat_s:
            raise ValueError(f"stall_timeout_s ({self.stall_timeout_s:g} s) must be longer than heartbeat_s "
                             f"({self.heartbeat_s:g} s): a silence shorter than a heartbeat cannot be told from one")
        return self

    @model_validator(mode="before")
    @classmethod
    def _external_is_placed_nowhere(cls, data: Any) -> Any:
        """An external model has no node and no file: node is 'local', model_path may be left out."""
        runtime = data.get("runtime") if isinstance(data, dict) else None
        if isinstance(runtime, str) and runtime in PROFILES and not PROFILES[runtime].on_node:
            data = {**data, "node": LOCAL_NODE}
            data.setdefault("model_path", "(external)")
        return data

    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    auto_start: bool = False
    start_on_request: bool = Field(default=True, description="Load it when a request names it (as LM Studio and "
                                   "Ollama do); /v1/models lists it while stopped.")
    idle_unload_seconds: int | None = Field(default=None, ge=0)
    memory_budget_gib: float | None = Field(default=None, gt=0)
    startup_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    max_queue: int = Field(default=64, ge=0, le=10_000, description="Requests that may wait for a slot or a load.")
    # A runtime that goes silent mid-answer (core.relay): the stream is cut and the model flagged Stalled.
    stall_timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Once tokens flow, an answer silent "
                                   "this long is cut with an error event and the model flagged Stalled; "
                                   "3 stalls in 10 minutes restart it.")
    heartbeat_s: float = Field(default=10.0, gt=0, le=600, description="Until the first token of a streamed "
                               "answer (a long prompt being read), an SSE comment this often keeps clients and "
                               "proxies from timing out.")
    preset: Preset = Field(default_factory=Preset, description="Defaults for requests that do not set them: a "
                           "system prompt and sampling (applied by the daemon's router; no restart needed).")
    tags: list[str] = Field(default_factory=list)
    description: str = ""
    # Loading on demand by memory (daemon.models.placement): what may be unloaded to make room.
    pinned: bool = Field(default=False, description="Never unloaded to make room for another model.")
    model_class: Literal["critical", "standard", "opportunistic"] = Field(
        default="standard", description="Unloaded to make room only for a model of this class or a higher one "
        "(critical > standard > opportunistic); the lowest class goes first.")
    # LoRA adapters (llama.cpp): each served under its own name, unique among all served names.
    adapters: list[Adapter] = Field(default_factory=list, max_length=16, description="llama.cpp: LoRA adapters, "
                                    "each a `model` of its own: a request for one gets this model with only that "
                                    "adapter applied; a request for this model applies none.")
    # One model across nodes (llama.cpp RPC, daemon.models.rpc): helper nodes lend their memory.
    rpc_nodes: list[str] = Field(default_factory=list, max_length=8, description="llama.cpp: helper nodes (id, id "
                                 "prefix or name; stored as ids) whose rpc-servers hold part of the layers; each "
                                 "needs llama.cpp's rpc-server. Empty: the model runs on its node alone.")


class ModelStatus(BaseModel):
    """A model's live state, as the daemon sees it."""

    id: str
    served_name: str
    state: ModelState
    node: str = LOCAL_NODE
    node_name: str = Field(default="", description="The node's name (its host name for 'local'), for people: "
                           "a paired node's id is 64 hex digits.")
    busy: str | None = Field(default=None, description="A job holds the model: 'tuning (job ...)' or "
                             "'benchmarking (job ...)'. /v1 answers 503 and a Start is refused meanwhile.")
    endpoint: str | None = None
    pid: int | None = None
    started_at: float | None = None
    error: str | None = None
    last_log_lines: list[str] = Field(default_factory=list)
    restart_pending: bool = False
    crash_count: int = 0
    restarts_paused: bool = False
    config_hash: str | None = None
    running_config_hash: str | None = None
    evicted: str | None = Field(default=None, description="Why the daemon last unloaded it to make room for another "
                                "model; cleared when it starts again.")
    stalled: str | None = Field(default=None, description="Its runtime went silent mid-answer and the request was "
                                "cut (when, and for how long); cleared by the next answer that completes, or a start.")
    slow: str | None = Field(default=None, description="It answers far slower than its own history (its recent "
                             "decode speed against its usual, daemon.models.speed); cleared when it is back, or a start.")
    rpc_helpers: list[RpcHelper] = Field(default_factory=list, description="One model across nodes: each helper "
                                         "node of ``rpc_nodes`` and its rpc-server (daemon.models.rpc).")
    backend: str | None = Field(default=None, description="llama.cpp: what it computes on (cpu, vulkan, cuda, metal).")
    offload: Offload | None = Field(default=None, description="llama.cpp: layers on the GPU of all, and the buffers "
                                    "per device (Vulkan0, CUDA0, MTL0), from its load log.")


class ModelView(BaseModel):
    """A definition with its status, as the Models page lists it."""

    definition: ModelDefinition
    status: ModelStatus


class RouterStats(BaseModel):
    total: int = 0
    failed: int = 0
    in_flight: int = 0


class HostSnapshot(BaseModel):
    """A node's latest host figures."""

    node: str = LOCAL_NODE
    node_name: str = Field(default="", description="The node's name, for people.")
    online: bool = True
    cpu_percent: float | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    disk_total: int | None = Field(default=None, description="The disk holding the node's models folder.")
    disk_free: int | None = None


class DaemonInfo(BaseModel):
    version: str
    host: str
    port: int
    api_url: str = Field(description="The /v1 URL to give clients: this machine's LAN address when /v1 is open "
                         "to the network (never 0.0.0.0), else 127.0.0.1.")
    lan_urls: list[str] = Field(default_factory=list, description="Every /v1 URL other devices can use, one per "
                                "LAN address of this machine; empty while /v1 is on loopback only.")
    keys_required: bool
    started_at: float
    home: str


class StatusResponse(BaseModel):
    daemon: DaemonInfo
    models: list[ModelStatus]
    router: dict[str, RouterStats] = Field(default_factory=dict)
    hosts: list[HostSnapshot] = Field(default_factory=list)
    last_event_id: int = 0
    # Secrets at rest (core.key_store): the daemon's private keys in the keychain, or 0600 files + a warning.
    keys_at_rest: KeysAtRest | None = None


class Event(BaseModel):
    """One thing that happened. Ids are monotonic within one daemon run (``boot_id``)."""

    id: int
    ts: float
    type: str = Field(description="model.state | model.flagged (data: stalled, the why or null) | model.evicted (data: for_model, freed_bytes, reason) | model.added | model.updated | model.update_available (data: revision, daemon.sources.updates) | model.update_refused (data: reason) | model.removed | keys.changed | settings.changed"
                                  " | job.started | job.progress | job.finished (data.job: a JobView)"
                                  " | node.state | node.paired | node.removed | node.discovered | node.vanished"
                                  " (data.node: a node id)")
    model: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class EventsPage(BaseModel):
    boot_id: str
    last_id: int
    events: list[Event]
    reset: bool = Field(default=False, description="True when `since` is unknown: resync from /api/status.")


class ApiKeyLimits(BaseModel):
    """A key's limits on /v1 (``daemon.router.limits``); None is no limit. Also the body of
    ``PATCH /api/keys/{id}``, where a field left out keeps its value and null clears it."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=1, le=1_000_000,
                                            description="Requests in any 60 seconds (a sliding window).")
    tokens_per_day: int | None = Field(default=None, ge=1,
                                       description="Prompt plus completion tokens per UTC day.")


class ApiKeyInfo(BaseModel):
    id: str
    name: str
    prefix: str
    created_at: float
    last_used_at: float | None = None
    requests_24h: int = Field(default=0, description="/v1 requests made with this key in the last 24 hours.")
    tokens_24h: int = Field(default=0, description="Prompt plus completion tokens of those requests.")
    requests_total: int = Field(default=0, description="/v1 requests made with this key since it was created.")
    tokens_total: int = Field(default=0, description="Prompt plus completion tokens since it was created.")
    limits: ApiKeyLimits = Field(default_factory=ApiKeyLimits)
    tokens_today: int = Field(default=0, description="Tokens counted against tokens_per_day: since 00:00 UTC.")
    requests_last_minute: int = Field(default=0, description="Requests counted against requests_per_minute now.")


class ApiKeyCreated(BaseModel):
    info: ApiKeyInfo
    key: str = Field(description="The secret itself; shown this once, never stored.")


class ApiKeyCreate(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    limits: ApiKeyLimits = Field(default_factory=ApiKeyLimits)


# --- tracing (OpenTelemetry, daemon.tracing) ---
class TracingSettings(BaseModel):
    """OpenTelemetry traces of /v1 requests, sent over OTLP/HTTP; read at the daemon's start (a
    change is saved at once and applies from the next start)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="Trace /v1 requests (off: no spans, no traceparent sent).")
    endpoint: str = Field(default="http://127.0.0.1:4318/v1/traces", pattern=r"^https?://\S+$",
                          description="The OTLP/HTTP traces endpoint, e.g. http://host:4318/v1/traces.")
    service_name: str = Field(default="mirbadllm-daemon", min_length=1, max_length=200,
                              description="service.name of the spans.")
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0,
                                description="Share of new traces kept; a client's traceparent decides for its own.")


class DaemonSettings(BaseModel):
    """Settings the app may change at run time."""

    model_config = ConfigDict(extra="forbid")

    lan_access: bool = Field(default=False, description="Serve /v1 on every interface; requires API keys.")
    require_api_keys: bool = Field(default=False, description="Require a key on /v1 even on loopback.")
    # Daily backups (daemon.backup): on by default into <home>/backups, keeping 7; no secrets without a passphrase file.
    backup: BackupSettings = Field(default_factory=BackupSettings, description="Scheduled backups ([backup]).")
    # The audit log (daemon.audit): entries older than this are dropped by the daemon's housekeeping.
    audit_retention_days: int = Field(default=90, ge=1, le=3650, description="Days an audit-log entry is kept.")
    tracing: TracingSettings = Field(default_factory=TracingSettings,
                                     description="OpenTelemetry tracing of /v1 (applies from the next start).")


HistoryRange = Literal["5m", "1h", "24h", "7d"]


class HistoryPoint(BaseModel):
    ts: float
    values: dict[str, float | None]


class HistorySeries(BaseModel):
    """A time series for charts: each point carries every metric of the subject."""

    subject: str
    range: HistoryRange
    step_s: float
    points: list[HistoryPoint]


class RequestRecord(BaseModel):
    """One access-log row: what happened to one /v1 request (queries: ``daemon.api.access_log``)."""

    id: str = Field(description="The request's X-Request-Id (the client's own when it sent a valid one).")
    ts: float = Field(description="Unix time the request finished.")
    model: str | None = Field(description="The model asked for (its id); None when refused before one was known.")
    node: str | None = Field(description="The node that ran it (an id: 'local' or 64 hex digits); None when none did.")
    path: str
    status: int
    queue_ms: float | None = Field(default=None, description="Time waiting for a free slot of the model.")
    ttft_ms: float | None = Field(default=None, description="Time to the answer's first byte, after the queue.")
    total_ms: float | None = Field(default=None, description="Time from arrival to the answer's end.")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    key_id: str | None = Field(default=None, description="The API key used; None without one.")
    error: str | None = Field(default=None, description="Why it failed (or was retried); None when it went well.")
    answered_by: str | None = Field(default=None, description="The fallback model (id) that answered in the "
                                    "requested model's place; None when the requested model answered or none did.")
    node_name: str = Field(default="", description="The node's name, for people (not stored: named as the row "
                           "is read); '' when no node ran it.")
