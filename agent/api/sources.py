"""Contracts of getting models onto a node: GGUF facts, the memory estimate, downloads and imports.

Spoken on ``/agent/v1`` (see ``AgentClient``) and reused by the daemon's admin API. New fields are
additive, with defaults. Secrets (a Hugging Face token) travel in requests only and are never
part of an answer.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.api.backends import BackendChoice
from agent.api.llamacpp import LlamaCppSettings


class GgufKind(BaseModel):
    """What kind of file the header says it is: a model, a vision projector, a LoRA adapter."""

    general_type: str | None = Field(default=None, description="`general.type` ('model', 'adapter', 'mmproj'); "
                                     "None: the header does not say.")
    adapter_type: str | None = Field(default=None, description="`adapter.type` of an adapter ('lora').")


def lora_problem(general_type: str | None, adapter_type: str | None, architecture: str,
                 base_architecture: str) -> str | None:
    """Why a GGUF file with these header facts is no LoRA adapter for a model of ``base_architecture``
    (None: it is one). ``architecture`` is the file's ``general.architecture``.

    llama.cpp's converter writes ``general.type = "adapter"``, ``adapter.type = "lora"`` and the
    base model's ``general.architecture``; llama-server refuses any other file at load, late and in
    its log only. The agent asks this at start (``agent.gguf_facts.adapter_problem``), the daemon
    when a definition is saved (from a ``GgufSummary``'s ``kind``)."""
    if general_type != "adapter":
        said = "missing" if general_type is None else repr(general_type[:40])
        return f"is not an adapter (general.type is {said}, not 'adapter')"
    if adapter_type != "lora":
        return f"is not a LoRA adapter (adapter.type is {str(adapter_type)[:40]!r}, not 'lora')"
    if architecture != base_architecture:
        return f"is an adapter for architecture '{architecture}', not for the model's '{base_architecture}'"
    return None


class GgufSummary(BaseModel):
    """What a GGUF header says about a model, as far as memory and serving are concerned."""

    architecture: str
    name: str = ""
    file_size: int
    tensor_bytes: int = Field(description="Bytes of all tensors of the model (every shard).")
    tensor_count: int
    parameter_count: int | None = Field(default=None, description="Weights of the model, counted from its tensors "
                                        "(None: a split model, or an older agent).")
    block_count: int = 0
    context_length: int | None = None
    embedding_length: int | None = None
    feed_forward_length: int | None = None
    head_count: int | None = None
    head_count_kv: list[int] = Field(default_factory=list, description="KV heads of each layer.")
    key_length: int | None = None
    value_length: int | None = None
    sliding_window: int | None = None
    swa_layers: list[bool] = Field(default_factory=list, description="Per layer: uses the sliding window.")
    vocab_size: int | None = None
    file_type: int | None = None
    split_count: int = 1
    is_projector: bool = Field(default=False, description="A vision projector (mmproj), not a model.")
    layer_bytes: list[int] = Field(default_factory=list, description="Weights of each repeating layer.")
    output_bytes: int = Field(default=0, description="Output head and final norm.")
    output_tied: bool = Field(default=False, description="The output head reuses the token embeddings.")
    embedding_bytes: int = Field(default=0, description="Token embedding table (stays on the CPU).")
    repack_bytes: int = Field(default=0, description="Weights llama.cpp repacks into a second copy on CPU.")
    has_chat_template: bool | None = Field(
        default=None, description="The header carries `tokenizer.chat_template` (None: not known, an older agent). "
                                  "Without one, a model is a base model that continues text.")
    kind: GgufKind | None = Field(
        default=None, description="`general.type` and `adapter.type` (None: not known, an older agent); with "
                                  "`architecture`, they tell a LoRA adapter for a model (``lora_problem``).")


class MemoryEstimate(BaseModel):
    """Memory one llama-server instance will need, split by where it lives."""

    ctx_size: int = Field(description="Total context of all slots, in tokens.")
    parallel: int
    n_gpu_layers: int = 0
    weights_bytes: int
    kv_cache_bytes: int
    compute_bytes: int
    overhead_bytes: int
    host_bytes: int = Field(description="Needed in system memory.")
    gpu_bytes: list[int] = Field(default_factory=list, description="Needed on each discrete GPU.")
    total_bytes: int


class GpuBudget(BaseModel):
    index: int
    name: str = ""
    free_bytes: int
    budget_bytes: int = Field(description="Free memory less the GPU reserve.")
    needed_bytes: int = 0


class HfFileRef(BaseModel):
    """A file in a Hugging Face model repo; ``file`` may be a glob (``*Q4_K_M*.gguf``)."""

    model_config = ConfigDict(extra="forbid")

    repo: str = Field(min_length=3, max_length=200)
    file: str | None = Field(default=None, max_length=1024)
    quant: str | None = Field(default=None, max_length=64, description="Pick files by quant: Q4_K_M.")
    revision: str = Field(default="main", max_length=128)


class FitRequest(BaseModel):
    """Will this model fit this node? A local file, or a Hugging Face file read by ranges."""

    model_config = ConfigDict(extra="forbid")

    model_path: str | None = None
    hf: HfFileRef | None = None
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings)
    token: str | None = Field(default=None, description="Hugging Face token; sent to the hub only.")
    rpc_devices: int = Field(default=0, ge=0, le=128, description="One model across nodes: its helpers' RPC "
                             "devices; the report is then of the main node's share (agent.rpc.main_share).")
    backend: BackendChoice = Field(default="auto", description="The node's backend choice: the GPUs count only "
                                   "where a start would compute on one, named as that backend names them.")


class FitReport(BaseModel):
    summary: GgufSummary
    estimate: MemoryEstimate
    memory_total: int
    memory_available: int
    reserve_bytes: int
    pending_bytes: int = Field(default=0, description="Held for instances still loading.")
    gpus: list[GpuBudget] = Field(default_factory=list)
    unified_memory: bool = False
    fits: bool
    max_ctx_size: int = Field(description="Largest total context that fits (0: none).")
    max_gpu_layers: int | None = Field(default=None, description="Most layers that fit on the GPUs.")
    message: str = ""
    source: str = ""
    remote_bytes: int | None = Field(default=None, description="With rpc_devices: what goes to the helpers' "
                                     "devices; None when the main's own GPUs' part is not known (no --tensor-split).")


class DownloadRequest(BaseModel):
    """Fetch a model file onto the node: from Hugging Face (``hf``) or a plain ``url``."""

    model_config = ConfigDict(extra="forbid")

    hf: HfFileRef | None = None
    url: str | None = Field(default=None, max_length=4096)
    target: str | None = Field(default=None, max_length=200, description="Folder under the models directory.")
    with_projector: bool = Field(default=True, description="Also fetch the repo's vision projector.")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="Checksum of a plain URL's file.")
    token: str | None = Field(default=None, description="Hugging Face token; sent to the hub host only.")


class OllamaImportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=300, description="An Ollama name: llama3.2:3b.")
    store: str | None = Field(default=None, description="Ollama's models folder; default ~/.ollama/models.")
    copy_files: bool = Field(default=False, description="Copy instead of hard-linking.")
    target: str | None = Field(default=None, max_length=200, description="Folder under the models directory.")


class FolderImportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    folder: str = Field(min_length=1, max_length=4096)


class OllamaModelInfo(BaseModel):
    model: str
    size: int = 0
    has_projector: bool = False


class LmStudioModelInfo(BaseModel):
    """A GGUF model in one of LM Studio's models folders (``publisher/model/file.gguf``)."""

    model: str = Field(description="publisher/model/file.gguf, as LM Studio shows it.")
    path: str = Field(description="The file on the node.")
    size: int = 0
    projector_path: str | None = Field(default=None, description="The folder's one vision projector.")


class LmStudioImportRequest(BaseModel):
    """Register GGUF files of LM Studio's folders where they lie (each must be one ``list_lmstudio`` finds)."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(min_length=1, max_length=100, description="The files, as listed (``path``).")
    folder: str | None = Field(default=None, max_length=4096, description="A models folder of LM Studio's "
                               "layout (publisher/model/file.gguf) besides its own folders.")


class SourceFile(BaseModel):
    """One file a model was fetched as (its model file, shards and projector), as the hub listed it."""

    path: str = Field(max_length=1024, description="The file's path in its repository.")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="None: not an LFS file.")
    size: int = Field(default=0, ge=0)


class ImportedModel(BaseModel):
    """A model file now on the node, ready to register."""

    name: str
    model_path: str
    projector_path: str | None = None
    size: int = 0
    sha256: str | None = None
    hf_repo: str | None = None
    hf_file: str | None = None
    revision: str | None = None
    origin: str = ""
    files: list[SourceFile] = Field(default_factory=list, description="From the hub: each file fetched, with "
                                    "the SHA-256 it was verified against.")


class TransferState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED = "paused"  # stopped with its partial files kept; a resume goes on from them


TransferKind = Literal["hf", "url", "ollama", "folder", "mirror"]  # mirror: the daemon pushes it (agent.api.mirror)
FINISHED_TRANSFERS = frozenset({TransferState.DONE, TransferState.FAILED, TransferState.CANCELLED})
SETTLED_TRANSFERS = FINISHED_TRANSFERS | {TransferState.PAUSED}  # nothing runs: no progress to follow


class TransferInfo(BaseModel):
    """One download or import on a node, and how far it got."""

    id: str
    kind: TransferKind
    label: str
    state: TransferState = TransferState.QUEUED
    stage: str = ""
    bytes_done: int = 0
    bytes_total: int | None = None
    files: list[str] = Field(default_factory=list)
    error: str | None = None
    result: list[ImportedModel] = Field(default_factory=list)
    created_at: float = 0.0
    finished_at: float | None = None
    pausable: bool = Field(default=False, description="A download or a mirror push: a pause keeps its partial "
                           "files and a resume (or a retry) goes on from them (HTTP Range; the node's partial).")


class TransfersPage(BaseModel):
    version: int
    transfers: list[TransferInfo]
