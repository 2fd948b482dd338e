"""The model settings editor, Qt-free: field specs generated from the contracts, and validation.

Every llama.cpp field comes from ``LlamaCppSettings.model_fields`` (its flag, the runtime's own
default shown as a placeholder, its unit and bounds), so a new typed setting appears in the editor
without touching the app. Validation is pydantic's own: the editor holds raw text, builds a
``ModelDefinition`` from it, and maps each pydantic error back to the field it belongs to.
"""

from __future__ import annotations

import shlex
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from daemon.api.contracts import LlamaCppSettings
from daemon.api.models import ModelDefinition

SETTINGS_PREFIX = "settings."


@dataclass(frozen=True)
class FieldSpec:
    """One editor row. ``key`` is a dotted path into ``ModelDefinition`` (``settings.ctx_size``)."""

    key: str
    label: str
    kind: str  # int | float | bool | choice | text | args | env | tags
    group: str
    help: str = ""
    unit: str = ""
    placeholder: str = ""
    choices: tuple[str, ...] = ()
    flag: str = ""
    optional: bool = True


_LABELS = {
    "ctx_size": "Context size", "parallel": "Parallel slots", "n_gpu_layers": "GPU layers",
    "threads_batch": "Prompt threads", "ubatch_size": "Micro-batch size", "flash_attn": "Flash attention",
    "cache_type_k": "KV cache type (K)", "cache_type_v": "KV cache type (V)", "mlock": "Lock in RAM",
    "no_mmap": "Don't memory-map", "embeddings": "Embeddings only", "jinja": "Jinja chat template",
}


def _label(name: str) -> str:
    if name in _LABELS:
        return _LABELS[name]
    text = name.replace("_", " ")
    return text[:1].upper() + text[1:]


def _kind_of(annotation: Any) -> tuple[str, tuple[str, ...]]:
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    base = args[0]
    if typing.get_origin(base) is typing.Literal:
        return "choice", tuple(str(c) for c in typing.get_args(base))
    if base is bool:
        return "bool", ()
    if base is int:
        return "int", ()
    if base is float:
        return "float", ()
    return "text", ()


def llamacpp_fields() -> tuple[FieldSpec, ...]:
    specs = []
    for name, info in LlamaCppSettings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind, choices = _kind_of(info.annotation)
        default = extra.get("runtime_default", "")
        specs.append(FieldSpec(
            key=SETTINGS_PREFIX + name, label=_label(name), kind=kind, group="llama.cpp runtime",
            help=info.description or "", unit=str(extra.get("unit") or ""),
            placeholder=f"default: {default}" if default not in ("", None) else "", choices=choices,
            flag=str(extra.get("flag") or ""), optional=kind != "bool"))
    return tuple(specs)


def definition_fields() -> tuple[FieldSpec, ...]:
    return (
        FieldSpec("id", "Id", "text", "Model", "Lowercase letters, digits and '-'; cannot change later.",
                  optional=False),
        FieldSpec("served_name", "Served name", "text", "Model", "The `model` clients send.", optional=False),
        FieldSpec("model_path", "Model file", "text", "Model", "Path of the GGUF file on the node.",
                  optional=False),
        FieldSpec("node", "Node", "text", "Model", "'local' for this machine.", optional=False),
        FieldSpec("tags", "Tags", "tags", "Model", "Comma-separated, for filtering."),
        FieldSpec("description", "Description", "text", "Model"),
        FieldSpec("auto_start", "Start with the daemon", "bool", "Lifecycle", optional=False),
        FieldSpec("start_on_request", "Start on first request", "bool", "Lifecycle", optional=False),
        FieldSpec("idle_unload_seconds", "Unload when idle after", "int", "Lifecycle", unit="s",
                  placeholder="never"),
        FieldSpec("memory_budget_gib", "Memory budget", "float", "Lifecycle", unit="GiB",
                  placeholder="no limit"),
        FieldSpec("startup_timeout_s", "Startup timeout", "float", "Lifecycle", unit="s", optional=False),
        FieldSpec("extra_args", "Extra arguments", "args", "Advanced",
                  "Passed to llama-server as typed (flags with a field above are moved into it)."),
        FieldSpec("env", "Environment", "env", "Advanced", "One NAME=value per line (allowlisted names only)."),
    )


def all_fields() -> tuple[FieldSpec, ...]:
    return definition_fields() + llamacpp_fields()


def raw_values(definition: ModelDefinition) -> dict[str, Any]:
    """The editor's text for each field: '' for 'runtime default', bools as bools."""
    data = definition.model_dump(mode="json")
    values: dict[str, Any] = {}
    for spec in all_fields():
        if spec.key.startswith(SETTINGS_PREFIX):
            value = data["settings"].get(spec.key[len(SETTINGS_PREFIX):])
        else:
            value = data.get(spec.key)
        if spec.kind == "bool":
            values[spec.key] = bool(value)
        elif spec.kind == "tags":
            values[spec.key] = ", ".join(value or [])
        elif spec.kind == "args":
            values[spec.key] = shlex.join(value or [])
        elif spec.kind == "env":
            values[spec.key] = "\n".join(f"{k}={v}" for k, v in (value or {}).items())
        else:
            values[spec.key] = "" if value is None else str(value)
    return values


class SettingsForm:
    """Raw editor values for one definition; ``validate()`` says what is wrong, field by field."""

    def __init__(self, definition: ModelDefinition, *, is_new: bool = False) -> None:
        self.original = definition
        self.is_new = is_new
        self.specs = all_fields()
        self.values = raw_values(definition)
        self._initial = dict(self.values)

    @property
    def dirty(self) -> bool:
        return self.is_new or self.values != self._initial

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def validate(self) -> tuple[ModelDefinition | None, dict[str, str]]:
        errors: dict[str, str] = {}
        data: dict[str, Any] = {"settings": {}}
        for spec in self.specs:
            try:
                value = _parse(spec, self.values.get(spec.key))
            except ValueError as exc:
                errors[spec.key] = str(exc)
                continue
            if spec.key.startswith(SETTINGS_PREFIX):
                if value is not None:
                    data["settings"][spec.key[len(SETTINGS_PREFIX):]] = value
            elif value is not None:
                data[spec.key] = value
        data["sources"] = self.original.sources.model_dump() if self.original.sources else None
        if not self.is_new:
            data["id"] = self.original.id  # the id is the model's identity: never renamed here
        try:
            definition = ModelDefinition.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                key = ".".join(str(p) for p in err["loc"][:2] if not isinstance(p, int))
                errors.setdefault(key if key in self.values else _owner(key), _message(err))
            return None, errors
        return (None, errors) if errors else (definition, {})


def _owner(key: str) -> str:
    return key if key else "form"


def _message(err: Any) -> str:
    if err.get("type") == "string_pattern_mismatch" and tuple(err.get("loc", ())) == ("id",):
        return "use lowercase letters, digits and '-' (at most 40), starting with a letter or digit"
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def _parse(spec: FieldSpec, raw: Any) -> Any:
    if spec.kind == "bool":
        return bool(raw)
    text = "" if raw is None else str(raw).strip()
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
    return text  # pydantic parses numbers and checks bounds and choices
