"""The model settings editor, Qt-free: field specs generated from the contracts, and validation.

A model runs on one runtime (``ModelDefinition.runtime``), and that runtime's settings model is
where its rows come from: ``LlamaCppSettings`` (``definition.settings``), ``VllmSettings``
(``definition.vllm``) or ``MlxSettings`` (``definition.mlx``). Each field gives its row: the label,
the flag, the runtime's own default (``json_schema_extra["runtime_default"]``) as the placeholder,
the unit, and a widget kind from its type (int, float, bool, a tri-state bool for ``bool | None``,
a choice for a ``Literal``, text for ``str``, JSON text for anything else: nested configs, lists,
unions). So a field added to a settings model appears in the editor without touching the app.

Validation is pydantic's own: the editor holds raw text, builds a ``ModelDefinition`` from it (what
the editor does not show, such as the other runtimes' settings, stays as it was), and maps each
pydantic error back to the field it belongs to.

An external endpoint (runtime ``external``) runs on no node and has no runtime settings: its rows
are the base URL, the provider's model name and the API key file (a path on the daemon's machine,
never the key), and its runtime is not switched here (the agent runtimes are offered only to a
model an agent runs). Every model has ``fallbacks``: the models that answer in its place. A
llama.cpp model has its helper nodes (``rpc_nodes``: other nodes holding part of its layers).
"""

from __future__ import annotations

import json
import re
import shlex
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from daemon.api.contracts import (
    DEFAULT_RUNTIME,
    PROFILES,
    RUNTIME_LABELS,
    RUNTIMES,
    profile,
    settings_type,
)
from daemon.api.models import ModelDefinition, Preset

SETTINGS_PREFIX = "settings."
MODEL_CLASSES = typing.get_args(ModelDefinition.model_fields["model_class"].annotation)

# runtime id -> (the ModelDefinition field holding its settings, the settings model), from the registry
RUNTIME_SECTIONS: dict[str, tuple[str, type[BaseModel]]] = {
    p.id: (p.settings_field, settings_type(p.id)) for p in PROFILES.values() if p.settings_field}
EXTERNAL = "external"  # no agent runs it: no node, no file, no settings section
ENDPOINT_GROUP = "Endpoint"
_MODEL_PATH_HELP = {"llamacpp": "Path of the GGUF file on the node.",
                    "vllm": "Path of the model folder on the node (mounted into the container).",
                    "mlx": "Path of the MLX model folder on the node."}


@dataclass(frozen=True)
class FieldSpec:
    """One editor row. ``key`` is a dotted path into ``ModelDefinition`` (``settings.ctx_size``,
    ``vllm.max_model_len``); ``section`` is the settings field it lives in ('' for the definition's
    own fields)."""

    key: str
    label: str
    kind: str  # int | float | bool | tribool | choice | text | json | args | env | tags
    group: str
    help: str = ""
    unit: str = ""
    placeholder: str = ""
    choices: tuple[str, ...] = ()
    flag: str = ""
    optional: bool = True
    section: str = ""
    values: tuple[Any, ...] = ()  # a choice's typed values, in the order of ``choices``
    choice_labels: tuple[str, ...] = ()  # what a choice shows, when not the value itself
    nested: bool = False  # a settings model of its own (vLLM's speculative config): unset keys not shown

    @property
    def name(self) -> str:
        return self.key[len(self.section) + 1:] if self.section else self.key


_LABELS = {
    "ctx_size": "Context size", "parallel": "Parallel slots", "n_gpu_layers": "GPU layers",
    "threads_batch": "Prompt threads", "ubatch_size": "Micro-batch size", "flash_attn": "Flash attention",
    "cache_type_k": "KV cache type (K)", "cache_type_v": "KV cache type (V)", "mlock": "Lock in RAM",
    "no_mmap": "Don't memory-map", "embeddings": "Embeddings only", "jinja": "Jinja chat template",
    "max_model_len": "Context length", "max_num_seqs": "Max sequences", "gpu_memory_utilization": "GPU memory share",
    "tensor_parallel_size": "Tensor-parallel size", "pipeline_parallel_size": "Pipeline-parallel size",
    "max_num_batched_tokens": "Max batched tokens", "kv_cache_dtype": "KV cache type", "max_tokens": "Max tokens",
    "n_predict": "Reply length cap",
}


def _label(name: str) -> str:
    if name in _LABELS:
        return _LABELS[name]
    text = name.replace("_", " ")
    return text[:1].upper() + text[1:]


def _kind_of(annotation: Any) -> tuple[str, tuple[Any, ...]]:
    """The widget kind of a field's type, and a ``Literal``'s values."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = typing.get_args(annotation) if union else (annotation,)
    optional = type(None) in args
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        base = rest[0]
        if typing.get_origin(base) is typing.Literal:
            return "choice", typing.get_args(base)
        if base is bool:
            return ("tribool" if optional else "bool"), ()
        if base is int:
            return "int", ()
        if base is float:
            return "float", ()
        if base is str:
            return "text", ()
    return "json", ()  # nested models, dicts, lists, unions: edited as JSON


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return str(value)


def runtime_group(runtime: str) -> str:
    return f"{RUNTIME_LABELS.get(runtime, runtime)} runtime"


def runtime_fields(runtime: str, model: type[BaseModel] | None = None) -> tuple[FieldSpec, ...]:
    """One row per field of the runtime's settings model (``model`` overrides which model); none for
    an external endpoint."""
    if runtime not in RUNTIME_SECTIONS and model is None:
        return ()
    section, default_model = RUNTIME_SECTIONS[runtime]
    specs = []
    for name, info in (model or default_model).model_fields.items():
        if info.exclude:  # the union's tag (agent.api.runtimes.RuntimeSettings): no row
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind, values = _kind_of(info.annotation)
        default = extra.get("runtime_default", None)
        if default in ("", None) and not info.is_required() and info.default is not None:
            default = info.default if not callable(info.default) else None
        shown = "" if default in ("", None) or kind == "bool" else f"default: {_shown(default)}"
        if kind == "json":
            shown = f"{shown} · JSON" if shown else "JSON; blank: the runtime's default"
        label = extra.get("label") or info.title or _label(name)
        specs.append(FieldSpec(
            key=f"{section}.{name}", label=str(label), kind=kind, group=runtime_group(runtime),
            help=info.description or "", unit=str(extra.get("unit") or ""), placeholder=shown,
            choices=tuple(str(v) for v in values), values=values, flag=str(extra.get("flag") or ""),
            optional=kind != "bool", section=section, nested=_has_model(info.annotation)))
    return tuple(specs)


def _has_model(annotation: Any) -> bool:
    args = typing.get_args(annotation) or (annotation,)
    return any(isinstance(a, type) and issubclass(a, BaseModel) for a in args)


def llamacpp_fields() -> tuple[FieldSpec, ...]:
    return runtime_fields("llamacpp")


_FALLBACKS = FieldSpec("fallbacks", "Fallbacks", "tags", "Model", "Served names or ids of other models, "
                       "comma-separated, that answer in this one's place, in order, when it cannot (not loadable, "
                       "no room, its node offline, its endpoint unreachable).", placeholder="none")


def external_fields() -> tuple[FieldSpec, ...]:
    """An external endpoint's rows: no node, no file, no runtime settings, no arguments."""
    group = ENDPOINT_GROUP
    return (
        FieldSpec("id", "Id", "text", "Model", "Lowercase letters, digits and '-'; cannot change later.",
                  optional=False),
        FieldSpec("served_name", "Served name", "text", "Model", "The `model` clients send.", optional=False),
        FieldSpec("runtime", "Runtime", "choice", "Model", "An OpenAI-compatible server somewhere else; the "
                  "daemon's router calls it. No node runs it.", choices=(EXTERNAL,), values=(EXTERNAL,),
                  optional=False, choice_labels=(RUNTIME_LABELS.get(EXTERNAL, EXTERNAL),)),
        FieldSpec("tags", "Tags", "tags", "Model", "Comma-separated, for filtering."),
        FieldSpec("description", "Description", "text", "Model"),
        _FALLBACKS,
        FieldSpec("base_url", "Base URL", "text", group, "The server's OpenAI base URL (http:// or https://), "
                  "with no key in it.", placeholder="https://api.openai.com/v1", optional=False),
        FieldSpec("provider_model", "Provider model", "text", group, "The model name the server knows; put in "
                  "each request's `model`.", placeholder="gpt-4o-mini", optional=False),
        FieldSpec("api_key_file", "API key file", "text", group, "An absolute path on the daemon's machine to a "
                  "file holding the key, read on each request; the key itself is never stored or shown.",
                  placeholder="no key sent"),
    )  # no lifecycle: the daemon probes it and the provider queues


def definition_fields(runtime: str = DEFAULT_RUNTIME) -> tuple[FieldSpec, ...]:
    can = profile(runtime)
    if not can.on_node:
        return external_fields()
    group = runtime_group(runtime)
    pinned = (FieldSpec("image", "Container image", "text", group,
                        "The vLLM image: a tag, or name@sha256:digest.", placeholder="the node's vLLM image"),
              ) if can.container else ()
    args_help = f"Passed to {can.executable} as typed"
    args_help += " (flags with a field above are moved into it)." if can.flags_lifted else "."
    return (
        FieldSpec("id", "Id", "text", "Model", "Lowercase letters, digits and '-'; cannot change later.",
                  optional=False),
        FieldSpec("served_name", "Served name", "text", "Model", "The `model` clients send.", optional=False),
        FieldSpec("runtime", "Runtime", "choice", "Model", "What runs the model; each has its own settings below.",
                  choices=tuple(RUNTIMES), values=tuple(RUNTIMES), optional=False,
                  choice_labels=tuple(RUNTIME_LABELS[r] for r in RUNTIMES)),
        FieldSpec("model_path", "Model", "text", "Model", _MODEL_PATH_HELP.get(runtime, ""), optional=False),
        FieldSpec("node", "Node", "text", "Model", "'local' for this machine; 'auto' for the node where it fits "
                  "best at each start.", optional=False),
        *((FieldSpec("rpc_nodes", "Helper nodes", "tags", "Model", "Other nodes that hold part of its layers "
                     "(llama.cpp RPC, inside the nodes' encrypted links), comma-separated names or ids; each needs "
                     "llama.cpp's rpc-server. Saved as node ids.", placeholder="none: it runs on its node alone"),)
          if can.spreads_over_nodes else ()),
        FieldSpec("tags", "Tags", "tags", "Model", "Comma-separated, for filtering."),
        FieldSpec("description", "Description", "text", "Model"),
        _FALLBACKS,
        *pinned,
        FieldSpec("runtime_version", "Pinned version", "text", group,
                  "The runtime version this model must run on; a node with another refuses to start it.",
                  placeholder="any version"),
        FieldSpec("auto_start", "Start with the daemon", "bool", "Lifecycle", optional=False),
        FieldSpec("start_on_request", "Start on first request", "bool", "Lifecycle", optional=False),
        FieldSpec("idle_unload_seconds", "Unload when idle after", "int", "Lifecycle", unit="s",
                  placeholder="never"),
        FieldSpec("memory_budget_gib", "Memory budget", "float", "Lifecycle", unit="GiB",
                  placeholder="no limit"),
        FieldSpec("startup_timeout_s", "Startup timeout", "float", "Lifecycle", unit="s", optional=False),
        FieldSpec("stall_timeout_s", "Cut a silent answer after", "float", "Lifecycle", "Once tokens flow, an "
                  "answer silent this long is ended with an error and the model flagged Stalled; 3 in 10 "
                  "minutes restart it.", unit="s", optional=False),
        FieldSpec("heartbeat_s", "Heartbeat while reading the prompt", "float", "Lifecycle", "Until the first "
                  "token, a streamed answer gets a keep-alive comment this often (shorter than the cut above).",
                  unit="s", optional=False),
        FieldSpec("pinned", "Keep loaded", "bool", "Lifecycle", "Never unloaded to make room for another model.",
                  optional=False),
        FieldSpec("model_class", "Class", "choice", "Lifecycle", "When a model loaded on request needs the "
                  "memory, the lowest class is unloaded first, and never one above the model that asks.",
                  choices=MODEL_CLASSES, values=MODEL_CLASSES, optional=False,
                  choice_labels=tuple(c.capitalize() for c in MODEL_CLASSES)),
        FieldSpec("extra_args", "Extra arguments", "args", "Advanced", args_help),
        FieldSpec("env", "Environment", "env", "Advanced", "One NAME=value per line (allowlisted names only)."),
        *((FieldSpec("adapters", "LoRA adapters", "json", "Advanced", 'A JSON list of {"name", "file", "scale"}: '
                     "each adapter is a model of its own, named `name`, in the model's folder.",
                     placeholder="none"),) if can.takes_adapters else ()),
    )


PRESET_GROUP = "Preset"
PRESET_SECTION = "preset"
_PRESET_LABELS = {"system_prompt": "System prompt", "temperature": "Temperature", "top_p": "Top-p",
                  "top_k": "Top-k", "min_p": "Min-p", "repeat_penalty": "Repeat penalty",
                  "max_tokens": "Max tokens"}


def preset_fields(runtime: str = DEFAULT_RUNTIME) -> tuple[FieldSpec, ...]:
    """The model's defaults for requests that do not set them: the fields its runtime reads."""
    reads = {field for field, _sent_as in profile(runtime).sampling} | {"system_prompt"}
    specs = []
    for name, info in Preset.model_fields.items():
        if name not in reads:
            continue
        kind, _values = _kind_of(info.annotation)
        specs.append(FieldSpec(key=f"{PRESET_SECTION}.{name}", label=_PRESET_LABELS.get(name, _label(name)),
                               kind=kind, group=PRESET_GROUP, help=info.description or "",
                               placeholder="the runtime's default" if name != "system_prompt" else "none",
                               section=PRESET_SECTION))
    return tuple(specs)


def all_fields(runtime: str = DEFAULT_RUNTIME) -> tuple[FieldSpec, ...]:
    return definition_fields(runtime) + preset_fields(runtime) + runtime_fields(runtime)


def groups(runtime: str) -> tuple[str, ...]:
    """The editor's cards, in order."""
    if not profile(runtime).on_node:
        return ("Model", ENDPOINT_GROUP, PRESET_GROUP)
    return ("Model", runtime_group(runtime), PRESET_GROUP, "Lifecycle", "Advanced")


def _every_field() -> tuple[FieldSpec, ...]:
    seen: dict[str, FieldSpec] = {}
    for runtime in (*RUNTIME_SECTIONS, EXTERNAL):
        for spec in all_fields(runtime):
            seen.setdefault(spec.key, spec)
    return tuple(seen.values())


def raw_value(spec: FieldSpec, value: Any) -> Any:
    """The editor's text for one value: '' for 'runtime default', bools as bools."""
    if spec.kind == "bool":
        return bool(value)
    if spec.kind == "tribool":
        return "" if value is None else ("true" if value else "false")
    if spec.kind == "tags":
        return ", ".join(value or [])
    if spec.kind == "args":
        return shlex.join(value or [])
    if spec.kind == "env":
        return "\n".join(f"{k}={v}" for k, v in (value or {}).items())
    if spec.kind == "json":
        if spec.nested and isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not None and v != {}}
        return "" if value is None else json.dumps(value)
    return "" if value is None else str(value)


def raw_values(definition: ModelDefinition) -> dict[str, Any]:
    """The editor's text for each field of every runtime (switching runtime keeps what was typed)."""
    data = definition.model_dump(mode="json")
    values: dict[str, Any] = {}
    for spec in _every_field():
        value = data[spec.section].get(spec.name) if spec.section else data.get(spec.key)
        values[spec.key] = raw_value(spec, value)
    return values


class SettingsForm:
    """Raw editor values for one definition; ``validate()`` says what is wrong, field by field."""

    def __init__(self, definition: ModelDefinition, *, is_new: bool = False) -> None:
        self.original = definition
        self.is_new = is_new
        self.values = raw_values(definition)
        self._initial = dict(self.values)

    @property
    def runtime(self) -> str:
        if not profile(self.original.runtime).on_node:  # an endpoint stays one; an agent's model is no endpoint
            return EXTERNAL
        runtime = str(self.values.get("runtime") or self.original.runtime)
        return runtime if runtime in RUNTIME_SECTIONS else self.original.runtime

    @property
    def specs(self) -> tuple[FieldSpec, ...]:
        return all_fields(self.runtime)

    @property
    def dirty(self) -> bool:
        return self.is_new or self.values != self._initial

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def validate(self) -> tuple[ModelDefinition | None, dict[str, str]]:
        errors: dict[str, str] = {}
        data: dict[str, Any] = self.original.model_dump(mode="json")  # what is not shown stays as it was
        if self.runtime in RUNTIME_SECTIONS:
            section = RUNTIME_SECTIONS[self.runtime][0]
            data[section] = {}  # the shown runtime's settings are rebuilt: blank means the runtime's default
        shown_preset = {spec.name for spec in self.specs if spec.section == PRESET_SECTION}
        data[PRESET_SECTION] = {k: v for k, v in (data.get(PRESET_SECTION) or {}).items()
                                if k not in shown_preset}  # blank: the runtime's default
        for spec in self.specs:
            try:
                value = _parse(spec, self.values.get(spec.key))
            except ValueError as exc:
                errors[spec.key] = str(exc)
                continue
            if spec.section:
                if value is not None:
                    data[spec.section][spec.name] = value
            elif value is None:
                data.pop(spec.key, None)
            else:
                data[spec.key] = value
        if not self.is_new:
            data["id"] = self.original.id  # the id is the model's identity: never renamed here
        if not profile(self.runtime).on_node:
            errors.update({k: v for k, v in _external_errors(data).items() if k not in errors})
        try:
            definition = ModelDefinition.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                loc = [str(p) for p in err["loc"] if not isinstance(p, int)]
                key = ".".join(loc[:2])
                if key not in self.values:
                    key = loc[0] if loc and loc[0] in self.values else _owner(key)
                    inner = []
                else:
                    inner = loc[2:]
                message = _message(err)
                errors.setdefault(key, f"{'.'.join(inner)}: {message}" if inner else message)
            return None, errors
        return (None, errors) if errors else (definition, {})


def _external_errors(data: dict[str, Any]) -> dict[str, str]:
    """What the daemon would refuse in an external endpoint, said at the field (the key file's
    existence is the daemon's to check: it is on the daemon's machine)."""
    errors = {}
    url = str(data.get("base_url") or "").strip()
    if not re.match(r"^https?://[^/\s?#]+", url, re.IGNORECASE):
        errors["base_url"] = "an http:// or https:// URL with a host, e.g. https://api.openai.com/v1"
    elif "@" in url.split("/", 3)[2] or "?" in url or "#" in url:
        errors["base_url"] = "no credentials, query or fragment in it (the key goes in the API key file)"
    if not str(data.get("provider_model") or "").strip():
        errors["provider_model"] = "the model name the server knows"
    key_file = str(data.get("api_key_file") or "")
    if key_file and not (key_file.startswith(("/", "\\\\")) or re.match(r"^[A-Za-z]:[\\/]", key_file)):
        errors["api_key_file"] = "an absolute path on the daemon's machine (the file holds the key)"
    return errors


def _owner(key: str) -> str:
    return key if key else "form"


def plain_validation(exc: ValidationError, labels: dict[str, str] | None = None) -> str:
    """pydantic's errors in plain words, each led by the field as the form names it: "Model id: use
    lowercase letters, ..." (never a type name or a documentation link)."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not isinstance(p, int))
        name = (labels or {}).get(loc) or (labels or {}).get(loc.split(".")[0]) or _label(loc.split(".")[-1] or "value")
        parts.append(f"{name}: {_message(err)}")
    return "; ".join(parts)


def _message(err: Any) -> str:
    if err.get("type") == "string_pattern_mismatch" and tuple(err.get("loc", ())) == ("id",):
        return "use lowercase letters, digits and '-' (at most 40), starting with a letter or digit"
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def _parse(spec: FieldSpec, raw: Any) -> Any:
    if spec.kind == "bool":
        return bool(raw)
    text = "" if raw is None else str(raw).strip()
    if spec.kind == "tribool":
        return None if text == "" else text == "true"
    if spec.kind == "tags":
        return [t.strip() for t in text.split(",") if t.strip()]
    if spec.kind == "args":
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise ValueError(f"cannot split into arguments: {exc}") from exc
    if spec.kind == "env":
        env = {}
        for line in filter(None, (ln.strip() for ln in text.splitlines())):
            name, eq, value = line.partition("=")
            if not eq or not name.strip():
                raise ValueError(f"“{line}” is not NAME=value")
            env[name.strip()] = value
        return env
    if text == "":
        if spec.optional:
            return None
        return text  # let pydantic say what is missing
    if spec.kind == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    if spec.kind == "choice":
        return next((v for v in spec.values if str(v) == text), text)
    return text  # pydantic parses numbers and checks bounds and choices
