"""Typed llama-server settings, and the pure functions between them and an argv.

The typed settings are the single owner of each setting: a flag found in ``extra_args`` that maps
to a field is lifted into that field (the last occurrence wins, as llama-server itself reads it).
``build_args`` is pure and its exact output is asserted by tests; ``parse_args`` reads a running
process's argv back; ``config_hash`` tells when a running model needs a restart.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.api.argv import (
    KEEP_AS_TYPED,
    ParsedCommand,
    flag_setting,
    flag_values,
    read_back,
    scan,
    without_executable,
)

CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
FlashAttn = Literal["on", "off", "auto"]
Pooling = Literal["none", "mean", "cls", "last", "rank"]
SplitMode = Literal["none", "layer", "row"]
CUDA_DEVICE = "CUDA"  # llama.cpp's CUDA backend names its devices CUDA0, CUDA1, ...


class LlamaCppSettings(BaseModel):
    """llama-server settings; ``None`` means "leave the runtime's own default"."""

    model_config = ConfigDict(extra="forbid")

    # The union's tag (agent.api.runtimes.RuntimeSettings). Never sent or stored: an older agent refuses a
    # settings key it does not know, and the definition's own ``runtime`` says it.
    runtime: Literal["llamacpp"] = Field(default="llamacpp", exclude=True)

    ctx_size: int | None = flag_setting("--ctx-size", "from model", "Total context, shared by the slots.", "tokens", ge=0, le=4_194_304)
    parallel: int | None = flag_setting("--parallel", "auto", "Parallel request slots.", "slots", ge=1, le=256)
    n_gpu_layers: int | None = flag_setting("--n-gpu-layers", "auto", "Layers offloaded to the GPU (-1: all).", "layers", ge=-1, le=1000)
    threads: int | None = flag_setting("--threads", "auto", "CPU threads for generation.", "threads", ge=1, le=1024)
    threads_batch: int | None = flag_setting("--threads-batch", "same as threads", "CPU threads for prompt processing.", "threads", ge=1, le=1024)
    batch_size: int | None = flag_setting("--batch-size", 2048, "Logical batch size.", "tokens", ge=1, le=1_048_576)
    ubatch_size: int | None = flag_setting("--ubatch-size", 512, "Physical batch size.", "tokens", ge=1, le=1_048_576)
    flash_attn: FlashAttn | None = flag_setting("--flash-attn", "auto", "Flash attention.")
    cache_type_k: CacheType | None = flag_setting("--cache-type-k", "f16", "KV cache type for K.")
    cache_type_v: CacheType | None = flag_setting("--cache-type-v", "f16", "KV cache type for V.")
    mlock: bool = Field(default=False, description="Lock the model in RAM.", json_schema_extra={"flag": "--mlock", "runtime_default": False, "unit": ""})
    no_mmap: bool = Field(default=False, description="Read the whole model instead of mapping it.", json_schema_extra={"flag": "--no-mmap", "runtime_default": False, "unit": ""})
    embeddings: bool = Field(default=False, description="Serve embeddings only.", json_schema_extra={"flag": "--embeddings", "runtime_default": False, "unit": ""})
    pooling: Pooling | None = flag_setting("--pooling", "from model", "Embedding pooling.")
    seed: int | None = flag_setting("--seed", -1, "Sampling seed (-1: random).", "", ge=-1)
    n_predict: int | None = flag_setting("--n-predict", -1, "Most tokens a reply generates when the request sets no "
                                     "max_tokens (-1: until the context is full).", "tokens", ge=-1, le=1_048_576)
    chat_template: str | None = flag_setting("--chat-template", "from model",
                                         "Built-in chat template (gemma, chatml, llama3, ...) for a model without "
                                         "one; built-in templates run without Jinja, so this turns Jinja off.",
                                         pattern=r"^[a-z0-9][a-z0-9_.-]{0,39}$")
    jinja: bool = Field(default=True, description="Use the model's Jinja chat template (tools need it).", json_schema_extra={"flag": "--jinja", "runtime_default": True, "unit": ""})
    # Placement on a node's GPUs (``agent.placement``): which GPUs, and how the layers are shared out.
    gpus: list[Annotated[int, Field(ge=0, le=63)]] | None = flag_setting(
        "--device", "every GPU", "The node's GPUs (NVML indices) it runs on, as --device CUDA0,CUDA1; "
        "[]: none (--device none).", max_length=16, title="GPUs")
    split_mode: SplitMode | None = flag_setting("--split-mode", "layer", "How layers are shared by several GPUs.")
    tensor_split: str | None = flag_setting("--tensor-split", "by free memory",
                                        "Share of the model on each GPU of the list, e.g. 3,1.",
                                        pattern=r"^\d{1,6}(\.\d{1,4})?(,\d{1,6}(\.\d{1,4})?){0,15}$")
    main_gpu: int | None = flag_setting("--main-gpu", 0, "The GPU of the list that holds the whole model with "
                                    "split mode none.", "", ge=0, le=63, title="Main GPU")


class Adapter(BaseModel):
    """A LoRA adapter loaded unapplied with its base model and chosen per request by its own name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="Its own served name: the `model` clients send "
                      "to get the base model with this adapter applied.")
    file: str = Field(min_length=1, max_length=4096, description="The GGUF LoRA adapter on the node, in the base "
                      "model's folder.")
    scale: float = Field(default=1.0, ge=-16.0, le=16.0, allow_inf_nan=False,
                         description="How strongly it applies (1.0: as trained).")


def lora_field(adapters: list[Adapter], chosen: int | None) -> list[dict[str, Any]]:
    """llama-server's per-request ``lora`` field: adapter ``chosen`` (an index, as ``--lora`` loaded
    them) at its scale, every other one at 0; ``None`` applies none."""
    return [{"id": i, "scale": a.scale if i == chosen else 0.0} for i, a in enumerate(adapters)]


# flag spellings llama-server accepts -> field. Value flags take the next argument.
_VALUE_FLAGS: dict[str, str] = {
    "-c": "ctx_size", "--ctx-size": "ctx_size",
    "-np": "parallel", "--parallel": "parallel",
    "-ngl": "n_gpu_layers", "--gpu-layers": "n_gpu_layers", "--n-gpu-layers": "n_gpu_layers",
    "-t": "threads", "--threads": "threads",
    "-tb": "threads_batch", "--threads-batch": "threads_batch",
    "-b": "batch_size", "--batch-size": "batch_size",
    "-ub": "ubatch_size", "--ubatch-size": "ubatch_size",
    "-fa": "flash_attn", "--flash-attn": "flash_attn",
    "-ctk": "cache_type_k", "--cache-type-k": "cache_type_k",
    "-ctv": "cache_type_v", "--cache-type-v": "cache_type_v",
    "--pooling": "pooling",
    "-s": "seed", "--seed": "seed",
    "--chat-template": "chat_template",
    "-dev": "gpus", "--device": "gpus",
    "-sm": "split_mode", "--split-mode": "split_mode",
    "-ts": "tensor_split", "--tensor-split": "tensor_split",
    "-mg": "main_gpu", "--main-gpu": "main_gpu",
}
_BOOL_FLAGS: dict[str, tuple[str, bool]] = {
    "--mlock": ("mlock", True),
    "--no-mmap": ("no_mmap", True), "--mmap": ("no_mmap", False),
    "--embedding": ("embeddings", True), "--embeddings": ("embeddings", True),
    "--jinja": ("jinja", True), "--no-jinja": ("jinja", False),
}
# Flags the builder sets itself; in extra_args they are dropped (with their value) and never passed
# twice. Which of them a user may not pass at all (the model, the host) is ``launch_policy``'s word:
# ``DENIED_FLAGS`` there is the one list of refused flags.
OWNED_VALUE_FLAGS = frozenset({"-m", "--model", "-a", "--alias", "--host", "--port"})
OWNED_BOOL_FLAGS = frozenset({"--metrics", "--slots", "--no-webui"})


def device_names(gpus: list[int], prefix: str | None = CUDA_DEVICE) -> str:
    """``--device``'s value for GPU indices in the backend a run computes on: [0, 2] -> CUDA0,CUDA2
    (``Vulkan0,Vulkan2`` on Vulkan, ``MTL0`` on Metal); [] or no GPU backend (``prefix`` None) -> none."""
    if prefix is None:
        return "none"
    return ",".join(f"{prefix}{i}" for i in gpus) or "none"


def parse_devices(raw: str) -> list[int] | None:
    """``--device``'s value as GPU indices; None for another backend's names (Vulkan0), kept as typed."""
    names = [n.strip() for n in raw.split(",")]
    if names == ["none"]:
        return []
    if all(re.fullmatch(rf"{CUDA_DEVICE}\d{{1,2}}", n) for n in names):
        return [int(n[len(CUDA_DEVICE):]) for n in names]
    return None


def gpu_env(settings: LlamaCppSettings) -> dict[str, str]:
    """The environment that makes ``--device``'s CUDA numbering the node's own (NVML's, PCI bus order)."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if settings.gpus else {}


def _coerce(name: str, raw: str) -> Any:
    annotation = LlamaCppSettings.model_fields[name].annotation
    if annotation in (int, int | None):
        return int(raw)
    if name == "gpus":  # another backend's device names (Vulkan0) stay in extra_args as typed
        devices = parse_devices(raw)
        return KEEP_AS_TYPED if devices is None else devices
    return raw


def _split(args: list[str], base: LlamaCppSettings) -> ParsedCommand[LlamaCppSettings]:
    found = scan(args, value_flags=_VALUE_FLAGS, bool_flags=_BOOL_FLAGS, owned_value_flags=OWNED_VALUE_FLAGS,
                 owned_bool_flags=OWNED_BOOL_FLAGS, coerce=_coerce)
    return read_back(found, base, name_flags=("-a", "--alias"), model_flags=("-m", "--model"))


def lift_extra_args(settings: LlamaCppSettings, extra_args: list[str]) -> tuple[LlamaCppSettings, list[str]]:
    """Move flags that have a typed field out of ``extra_args`` into the settings (last wins)."""
    parsed = _split(list(extra_args), settings)
    return parsed.settings, parsed.extra_args


def rpc_device_names(devices_per_peer: list[int]) -> list[str]:
    """The names llama.cpp gives the RPC devices of ``--rpc`` servers: RPC0, RPC1, ... in order."""
    return [f"RPC{i}" for i in range(sum(devices_per_peer))]


def build_args(settings: LlamaCppSettings, model_path: str, served_name: str, port: int,
               extra_args: list[str] | None = None, host: str = "127.0.0.1",
               adapters: list[Adapter] | None = None, rpc: list[str] | None = None,
               rpc_devices: list[int] | None = None, device_prefix: str | None = CUDA_DEVICE) -> list[str]:
    """The llama-server argv after the executable, in a fixed canonical order. ``device_prefix``:
    the device names of the backend it runs on (``agent.api.backends.Backend.device_prefix``). Adapters are loaded
    unapplied (``--lora`` each, ids in this order, then ``--lora-init-without-apply``): a request
    applies one with its ``lora`` field (``lora_field``).

    ``rpc``: the RPC servers (``host:port``, the agent's loopback forwards to its helpers), as
    ``--rpc`` right after the port: llama.cpp registers their devices while it reads the flag, so it
    comes before ``--device``, which then names them too (``rpc_devices``: how many each offers)."""
    settings, rest = lift_extra_args(settings, list(extra_args or []))
    argv = ["--model", model_path, "--alias", served_name, "--host", host, "--port", str(port)]
    if rpc:
        argv += ["--rpc", ",".join(rpc)]
        if settings.gpus is not None:
            names = [n for n in device_names(settings.gpus, device_prefix).split(",") if n != "none"]
            names += rpc_device_names(rpc_devices or [1] * len(rpc))
            argv += ["--device", ",".join(names)]
            settings = settings.model_copy(update={"gpus": None})
    for name, flag, value in flag_values(settings):
        if isinstance(value, bool):
            if name == "jinja":
                # With --jinja, llama-server would take a built-in template's *name* as the template.
                argv.append("--jinja" if value and settings.chat_template is None else "--no-jinja")
            elif value:
                argv.append(flag)
        elif isinstance(value, list):
            argv += [flag, device_names(value, device_prefix)]
        elif value is not None:
            argv += [flag, str(value)]
    for adapter in adapters or []:
        argv += ["--lora", adapter.file]
    if adapters:
        argv.append("--lora-init-without-apply")
    argv += ["--metrics", "--slots", "--no-webui"]
    return argv + rest


def parse_args(argv: list[str]) -> ParsedCommand[LlamaCppSettings]:
    """Read an argv (with or without the executable in front) back into settings."""
    return _split(without_executable(argv), LlamaCppSettings())


def config_hash(settings: LlamaCppSettings, model_path: str, served_name: str,
                extra_args: list[str] | None = None, adapters: list[Adapter] | None = None,
                rpc_nodes: list[str] | None = None) -> str:
    """A short hash of the canonical argv, port excluded: equal hashes run the same way. An adapter's
    name and scale are the router's, not the runtime's: changing them needs no restart. ``rpc_nodes``:
    the helpers' node ids in order (``LaunchSpec.rpc_peers``), standing in for the loopback forwards
    (whose ports change on every start); none gives the hash of a model on its node alone."""
    argv = build_args(settings, model_path, served_name, 0, extra_args, adapters=adapters,
                      rpc=[f"node:{n}" for n in rpc_nodes or []] or None)
    digest = hashlib.sha256(json.dumps(argv).encode()).hexdigest()
    return digest[:16]
