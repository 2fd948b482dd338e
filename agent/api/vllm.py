"""Typed vLLM settings, and the pure functions between them and ``vllm serve``'s argv.

The typed settings are the single owner of every setting they name: ``normalize`` lifts each of
them out of ``extra_args`` with vLLM's own semantics (``extra_args`` come last on the command line,
so they win), ``build_args`` emits each exactly once in a fixed order, ``parse_cmd`` reads a
container's Cmd back into the same shape, and ``config_hash`` tells when a running container
needs a restart. Nothing here touches a container, a file or the network.

Spellings ``normalize`` reads for an owned flag, as vLLM's argument parser does:
``--flag value``, ``--flag=value``, one argument ``"--flag value"``, ``_`` for ``-`` in the name
(``--max_num_seqs``), the short names ``-q``, ``-tp`` and ``-cc`` (``--compilation-config``),
``--x``/``--no-x`` for the tri-state booleans, and dotted keys of the two config objects
(``--speculative-config.num_speculative_tokens=3``, ``--speculative_config.model X``,
``-cc.cudagraph_mode=FULL``). ``-O…`` (vLLM's optimization level) is not owned and stays in
``extra_args``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agent.api.argv import flag_setting

KvCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"]
CudaGraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # a quantization method, parser or mode name

MODELS_MOUNT = "/models"  # where the container sees the models folder (read-only)
CONTAINER_PORT = 8000  # vLLM's port inside the container; the driver maps it to the host
QUIET_ENDPOINTS = "/health,/metrics"  # polled endpoints kept out of vLLM's access log


def _typed_keys_first(data: Any, typed: tuple[str, ...]) -> Any:
    """A typed key given inside ``extra`` moves to its field (one owner per key; a set field wins)."""
    if not isinstance(data, dict) or not isinstance(data.get("extra"), dict):
        return data
    data, extra = dict(data), dict(data["extra"])
    for key in typed:
        if key in extra:
            value = extra.pop(key)
            if data.get(key) is None:
                data[key] = value
    return {**data, "extra": extra}


class SpeculativeSettings(BaseModel):
    """vLLM's ``--speculative-config`` object: the keys MirbadLLM names, and every other key kept."""

    model_config = ConfigDict(extra="forbid")

    method: str | None = flag_setting("method", "inferred from the draft", "Speculative method (mtp, eagle, "
                                  "ngram, draft_model, ...).", pattern=_NAME)
    num_speculative_tokens: int | None = flag_setting("num_speculative_tokens", "from the method",
                                                  "Tokens proposed per step.", "tokens", ge=1, le=64)
    model: str | None = flag_setting("model", "none", "The draft model's path inside the container "
                                 "(under /models).", max_length=1000)
    extra: dict[str, Any] = Field(default_factory=dict, description="Every other speculative-config key.",
                                  json_schema_extra={"flag": "", "runtime_default": {}, "unit": ""})

    @model_validator(mode="before")
    @classmethod
    def _one_owner(cls, data: Any) -> Any:
        return _typed_keys_first(data, ("method", "num_speculative_tokens", "model"))

    def to_vllm(self) -> dict[str, Any]:
        """The object as vLLM reads it."""
        typed = {k: v for k, v in (("method", self.method), ("num_speculative_tokens", self.num_speculative_tokens),
                                   ("model", self.model)) if v is not None}
        return {**self.extra, **typed}

    @classmethod
    def from_vllm(cls, obj: dict[str, Any]) -> SpeculativeSettings:
        rest = dict(obj)
        typed = {k: rest.pop(k) for k in ("method", "num_speculative_tokens", "model") if k in rest}
        return cls.model_validate({**typed, "extra": rest})


class CompilationSettings(BaseModel):
    """vLLM's ``--compilation-config`` object: ``cudagraph_mode`` typed, every other key kept."""

    model_config = ConfigDict(extra="forbid")

    cudagraph_mode: CudaGraphMode | None = flag_setting("cudagraph_mode", "FULL_AND_PIECEWISE", "CUDA graph capture mode.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Every other compilation-config key.",
                                  json_schema_extra={"flag": "", "runtime_default": {}, "unit": ""})

    @model_validator(mode="before")
    @classmethod
    def _one_owner(cls, data: Any) -> Any:
        return _typed_keys_first(data, ("cudagraph_mode",))

    @field_validator("cudagraph_mode", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value  # vLLM reads the mode's name in any case

    def to_vllm(self) -> dict[str, Any]:
        typed = {"cudagraph_mode": self.cudagraph_mode} if self.cudagraph_mode is not None else {}
        return {**self.extra, **typed}

    @classmethod
    def from_vllm(cls, obj: dict[str, Any]) -> CompilationSettings:
        rest = dict(obj)
        typed = {"cudagraph_mode": rest.pop("cudagraph_mode")} if "cudagraph_mode" in rest else {}
        return cls.model_validate({**typed, "extra": rest})


class VllmSettings(BaseModel):
    """``vllm serve`` settings MirbadLLM owns; ``None`` means "leave vLLM's own default"."""

    model_config = ConfigDict(extra="forbid")

    # The union's tag (agent.api.runtimes.RuntimeSettings). Never sent or stored: an older agent refuses a
    # settings key it does not know, and the definition's own ``runtime`` says it.
    runtime: Literal["vllm"] = Field(default="vllm", exclude=True)

    quantization: str | None = flag_setting("--quantization", "from model", "Weight quantization method.",
                                        pattern=_NAME)
    kv_cache_dtype: KvCacheDtype | None = flag_setting("--kv-cache-dtype", "auto", "KV cache data type.")
    max_model_len: int | None = flag_setting("--max-model-len", "from model", "Context length.", "tokens",
                                         ge=1, le=16_777_216)
    max_num_seqs: int | None = flag_setting("--max-num-seqs", 256, "Sequences scheduled at once.", "sequences",
                                        ge=1, le=65_536)
    max_num_batched_tokens: int | None = flag_setting("--max-num-batched-tokens", "auto", "Tokens scheduled per step.",
                                                  "tokens", ge=1, le=16_777_216)
    tool_call_parser: str | None = flag_setting("--tool-call-parser", "none (no tool calls)", "Tool call parser; "
                                            "setting it enables automatic tool choice.", pattern=_NAME)
    reasoning_parser: str | None = flag_setting("--reasoning-parser", "none", "Reasoning output parser.", pattern=_NAME)
    enable_prefix_caching: bool | None = flag_setting("--enable-prefix-caching", "on", "Prefix caching (unset: "
                                                  "vLLM's default).")
    speculative: SpeculativeSettings | None = flag_setting("--speculative-config", "off", "Speculative decoding.")
    compilation: CompilationSettings | None = flag_setting("--compilation-config", "vLLM's", "torch.compile and "
                                                       "CUDA graph settings.")
    async_scheduling: bool | None = flag_setting("--async-scheduling", "vLLM's", "Asynchronous scheduling (unset: "
                                             "vLLM's default).")
    mamba_cache_mode: str | None = flag_setting("--mamba-cache-mode", "vLLM's", "Mamba state cache mode "
                                            "(hybrid models).", pattern=_NAME)
    tensor_parallel_size: int | None = flag_setting("--tensor-parallel-size", 1, "GPUs the model is split over.",
                                                "GPUs", ge=1, le=64)


# Spellings (after ``_`` -> ``-``) -> field, for the flags that take a value.
_SCALAR_FLAGS: dict[str, str] = {
    "--quantization": "quantization", "-q": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--tool-call-parser": "tool_call_parser",
    "--reasoning-parser": "reasoning_parser",
    "--mamba-cache-mode": "mamba_cache_mode",
    "--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
}
_OBJECT_FLAGS: dict[str, str] = {
    "--speculative-config": "speculative",
    "--compilation-config": "compilation", "-cc": "compilation",
}
_BOOL_FLAGS: dict[str, tuple[str, bool]] = {
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--async-scheduling": ("async_scheduling", True),
    "--no-async-scheduling": ("async_scheduling", False),
}
# Flags the builder sets itself: dropped from extra_args (with their value), never passed twice.
# Which of them a user may not pass at all is ``launch_policy``'s word (``VLLM_DENIED_FLAGS``).
OWNED_VALUE_FLAGS = frozenset({"--model", "--served-model-name", "--gpu-memory-utilization",
                               "--disable-access-log-for-endpoints", "--host", "--port"})
OWNED_BOOL_FLAGS = frozenset({"--enable-auto-tool-choice", "--no-enable-auto-tool-choice"})
LIFTED_FLAGS = frozenset(_SCALAR_FLAGS) | frozenset(_OBJECT_FLAGS) | frozenset(_BOOL_FLAGS)  # -> typed fields
_INT_FIELDS = frozenset({"max_model_len", "max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size"})
_HUMAN_INT_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgG]?)")
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


def flag_name(arg: str) -> str:
    """An option's canonical spelling: ``--max_num_seqs`` -> ``--max-num-seqs`` (vLLM reads both)."""
    if arg.startswith("--"):
        return "--" + arg[2:].replace("_", "-")
    return arg


def split_option(arg: str) -> tuple[str, str | None]:
    """``--flag=value`` / ``"--flag value"`` -> (flag, value); ``--flag`` -> (flag, None)."""
    if arg.startswith("-") and "=" in arg.split(" ", 1)[0]:
        flag, value = arg.split("=", 1)
        return flag, value
    if arg.startswith("-") and " " in arg.strip():
        flag, value = arg.strip().split(None, 1)
        return flag, value
    return arg, None


def _human_int(flag: str, raw: str) -> int:
    """vLLM's readable integers: ``32768``, ``32k`` (1000s), ``32K`` (1024s), ``1.5M``."""
    match = _HUMAN_INT_RE.fullmatch(raw.strip())
    if match is None:
        raise ValueError(f"{flag} needs a positive whole number (like 8192 or 32k), not {raw[:60]!r}")
    number, suffix = match.groups()
    value = float(number) * _SUFFIX[suffix]
    if value != int(value):
        raise ValueError(f"{flag} needs a whole number, not {raw[:60]!r}")
    return int(value)


def _json_object(flag: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} needs a JSON object, not {raw[:80]!r} ({exc.msg})") from exc
    if isinstance(value, dict):
        return value
    raise ValueError(f"{flag} needs a JSON object, not {raw[:80]!r}")


def _dotted_value(raw: str) -> Any:
    """A dotted key's value as vLLM reads it: JSON when it parses, else the text."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _set_path(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        child = target.get(key)
        if not isinstance(child, dict):
            child = target[key] = {}
        target = child
    target[keys[-1]] = value


def _typed_object(field: str, obj: dict[str, Any]) -> SpeculativeSettings | CompilationSettings | None:
    if not obj:
        return None  # an empty object is no object: nothing to configure
    if field == "speculative":
        return SpeculativeSettings.from_vllm(obj)
    return CompilationSettings.from_vllm(obj)


def _take_value(args: list[str], i: int, flag: str, inline: str | None) -> tuple[str, int]:
    if inline is not None:
        return inline, i
    if i + 1 >= len(args):
        raise ValueError(f"{flag} needs a value")
    return args[i + 1], i + 1


def _lift(settings: VllmSettings, extra_args: list[str],
          owned_out: dict[str, str] | None = None) -> tuple[VllmSettings, list[str]]:
    values: dict[str, Any] = {name: getattr(settings, name) for name in VllmSettings.model_fields}
    dotted: dict[str, dict[str, Any]] = {}  # field -> object built from dotted keys alone
    rest: list[str] = []
    args = list(extra_args)
    i = 0
    while i < len(args):
        arg = args[i]
        raw_flag, inline = split_option(arg)
        flag = flag_name(raw_flag)
        base, dot, _ = flag.partition(".")
        try:
            if dot and base in _OBJECT_FLAGS:
                raw, i = _take_value(args, i, raw_flag, inline)
                keys = raw_flag.split(".")[1:]  # keys keep their own spelling
                if not all(keys):
                    raise ValueError(f"{raw_flag} has an empty key")
                _set_path(dotted.setdefault(_OBJECT_FLAGS[base], {}), keys, _dotted_value(raw))
            elif flag in _OBJECT_FLAGS:
                raw, i = _take_value(args, i, raw_flag, inline)
                name = _OBJECT_FLAGS[flag]
                values[name] = _typed_object(name, _json_object(raw_flag, raw))
            elif flag in _SCALAR_FLAGS:
                raw, i = _take_value(args, i, raw_flag, inline)
                name = _SCALAR_FLAGS[flag]
                values[name] = _human_int(raw_flag, raw) if name in _INT_FIELDS else raw
                VllmSettings.model_validate({name: values[name]})
            elif flag in _BOOL_FLAGS:
                if inline is not None:
                    raise ValueError(f"{raw_flag} takes no value (use {raw_flag} or --no-{raw_flag[2:]})")
                name, on = _BOOL_FLAGS[flag]
                values[name] = on
            elif flag in OWNED_VALUE_FLAGS:
                raw, i = _take_value(args, i, raw_flag, inline)
                if owned_out is not None:
                    owned_out[flag] = raw
            elif flag in OWNED_BOOL_FLAGS:
                pass
            else:
                rest.append(arg)
        except ValidationError as exc:
            problem = exc.errors()[0]
            raise ValueError(f"{raw_flag}: {problem['msg']}") from exc
        i += 1
    for name, obj in dotted.items():  # dotted keys win over every full object, typed one included
        try:
            values[name] = _typed_object(name, obj)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise ValueError(f"{_field_flag(name)}.{where}: {problem['msg']}") from exc
    return VllmSettings.model_validate(values), rest


def _field_flag(name: str) -> str:
    return str((VllmSettings.model_fields[name].json_schema_extra or {})["flag"])  # type: ignore[index]


def normalize(settings: VllmSettings, extra_args: list[str]) -> tuple[VllmSettings, list[str]]:
    """Lift every owned flag out of ``extra_args`` into its typed field, as vLLM would read them.

    ``extra_args`` come after the typed flags on vLLM's command line, so a scalar found there
    replaces the typed value (the last one wins) and a full JSON object replaces the whole typed
    object. When any dotted key of a config object is present (``--speculative-config.model=…``),
    vLLM builds that object from the dotted keys alone (the last wins per key) and drops every full
    object for it, the typed one included. Every JSON key is kept. The flags the builder sets
    itself (``OWNED_VALUE_FLAGS``, ``OWNED_BOOL_FLAGS``) are dropped with their value; anything else
    stays in ``extra_args`` in its order. An owned flag whose value cannot be read raises
    ``ValueError`` naming the flag. Idempotent: normalizing a normalized pair changes nothing.
    """
    return _lift(settings, extra_args)


def _compact(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _argv(settings: VllmSettings, model_arg: str, served_name: str, extra_args: list[str],
          memory_arg: list[str]) -> list[str]:
    settings, rest = normalize(settings, extra_args)
    s = settings
    argv = ["--model", model_arg, "--served-model-name", served_name]
    for flag, value in (("--quantization", s.quantization), ("--kv-cache-dtype", s.kv_cache_dtype),
                        ("--max-model-len", s.max_model_len), ("--max-num-seqs", s.max_num_seqs),
                        ("--max-num-batched-tokens", s.max_num_batched_tokens),
                        ("--tensor-parallel-size", s.tensor_parallel_size)):
        if value is not None:
            argv += [flag, str(value)]
    argv += memory_arg
    if s.tool_call_parser is not None:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", s.tool_call_parser]
    if s.reasoning_parser is not None:
        argv += ["--reasoning-parser", s.reasoning_parser]
    if s.enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching")
    if s.speculative is not None:
        argv += ["--speculative-config", _compact(s.speculative.to_vllm())]
    if s.compilation is not None:
        argv += ["--compilation-config", _compact(s.compilation.to_vllm())]
    if s.async_scheduling is not None:
        argv.append("--async-scheduling" if s.async_scheduling else "--no-async-scheduling")
    if s.mamba_cache_mode is not None:
        argv += ["--mamba-cache-mode", s.mamba_cache_mode]
    argv += ["--disable-access-log-for-endpoints", QUIET_ENDPOINTS]
    return argv + rest


def container_model_path(model_path: str) -> str:
    """The model's path inside the container: ``org/model`` -> ``/models/org/model``.

    ``model_path`` is relative to the models mount (one already under ``/models/`` is kept);
    an absolute path elsewhere, ``..`` or a NUL raises ``ValueError``.
    """
    if "\0" in model_path or "\\" in model_path:
        raise ValueError(f"model path {model_path[:200]!r} has a NUL or a backslash")
    relative = model_path[len(MODELS_MOUNT) + 1:] if model_path.startswith(MODELS_MOUNT + "/") else model_path
    parts = relative.split("/")
    if relative.startswith("/") or not relative or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"model path {model_path[:200]!r} must be a path inside the models mount "
                         f"(like org/model), without '..'")
    return f"{MODELS_MOUNT}/{relative}"


def memory_fraction(memory_budget_gib: float, total_gib: float) -> str:
    """``--gpu-memory-utilization``'s value: the budget's share of the GPU, 4 decimals."""
    if total_gib <= 0 or memory_budget_gib <= 0 or memory_budget_gib > total_gib:
        raise ValueError(f"a memory budget of {memory_budget_gib} GiB does not fit {total_gib} GiB")
    return f"{memory_budget_gib / total_gib:.4f}"


def build_args(settings: VllmSettings, model_path: str, served_name: str, extra_args: list[str] | None = None,
               memory_budget_gib: float | None = None, total_gib: float | None = None) -> list[str]:
    """``vllm serve``'s argv (after ``vllm serve``), normalized first, in a fixed order.

    ``--model /models/{model_path} --served-model-name N [--quantization] [--kv-cache-dtype]
    [--max-model-len] [--max-num-seqs] [--max-num-batched-tokens] [--tensor-parallel-size]
    [--gpu-memory-utilization B/T] [--enable-auto-tool-choice --tool-call-parser P]
    [--reasoning-parser R] [--enable-prefix-caching|--no-enable-prefix-caching]
    [--speculative-config JSON] [--compilation-config JSON] [--async-scheduling|--no-async-scheduling]
    [--mamba-cache-mode M] --disable-access-log-for-endpoints /health,/metrics {extra_args...}``.

    A setting that is ``None`` emits no flag, so vLLM uses its own default; the tri-state booleans
    emit ``--x`` for True and ``--no-x`` for False. ``--gpu-memory-utilization`` is emitted only
    when both the budget and the GPU's total are known (``memory_fraction``; a budget over the
    total raises ``ValueError``). JSON objects are compact with sorted keys. The host and port are
    the container's (vLLM's 0.0.0.0:8000 inside; the driver maps it), so neither is in the argv.
    """
    memory: list[str] = []
    if memory_budget_gib is not None and total_gib is not None:
        memory = ["--gpu-memory-utilization", memory_fraction(memory_budget_gib, total_gib)]
    return _argv(settings, container_model_path(model_path), served_name, list(extra_args or []), memory)


def parse_cmd(cmd: list[str]) -> tuple[VllmSettings, str | None, str | None, list[str]]:
    """A container's Cmd read back as what vLLM ran: (settings, model_path, served_name, extra_args).

    Leading ``vllm``/``serve`` and a positional model are accepted; ``model_path`` comes back
    relative to the models mount as ``build_args`` takes it (``None`` when the Cmd names none).
    ``parse_cmd(build_args(s, p, n, e, ...))`` equals ``(*normalize(s, e)`` with ``p``, ``n``).
    """
    args = list(cmd)
    if args[:1] == ["vllm"]:
        args = args[1:]
    if args[:1] == ["serve"]:
        args = args[1:]
    model: str | None = None
    if args and not args[0].startswith("-"):
        model, args = args[0], args[1:]
    owned: dict[str, str] = {}
    settings, rest = _lift(VllmSettings(), args, owned)
    model = owned.get("--model", model)
    if model is not None and model.startswith(MODELS_MOUNT + "/"):
        model = model[len(MODELS_MOUNT) + 1:]
    return settings, model, owned.get("--served-model-name"), rest


def config_hash(image: str | None, settings: VllmSettings, model_path: str, served_name: str,
                extra_args: list[str] | None = None, memory_budget_gib: float | None = None,
                total_gib: float | None = None) -> str:
    """16 hex digits of SHA-256 over the image and the canonical (normalized) argv: equal hashes run
    the same way, and an unchanged definition keeps its hash.

    ``model_path`` is hashed as given (the definition's text, not mapped into the mount) and the
    memory budget (in whole MiB), not its share of the GPU, so the daemon, which knows neither the node's
    mount nor its GPU, hashes what the agent hashes. ``total_gib`` is therefore not hashed; it is
    accepted so callers pass what they pass to ``build_args``.
    """
    del total_gib  # see the docstring: the budget is what the definition says
    # In whole MiB: the agent gets the budget as bytes (int(GiB * 2**30)) and must hash what the daemon does.
    memory = ["--memory-budget-mib", str(round(memory_budget_gib * 1024))] if memory_budget_gib is not None else []
    argv = _argv(settings, model_path, served_name, list(extra_args or []), memory)
    payload = json.dumps({"image": image or "", "argv": argv})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
