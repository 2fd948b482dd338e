"""Typed ``mlx_lm.server`` settings, and the pure functions between them and its argv.

The flags are the ones mlx-lm's ``server.py`` declares (``mlx_lm.server --help``); each field
records its flag, mlx-lm's own default and a unit, and the app's editor is generated from that.
As for llama.cpp, a typed field is the single owner of its setting: the same flag found in
``extra_args`` is lifted into the field (the last occurrence wins, as argparse reads it).

``mlx_lm.server`` takes the model to serve from each request's ``model`` field and loads any
other name it is sent (from the Hugging Face cache, or by downloading it). So the agent starts it
with ``--model`` set to the *served name*, a relative path that the instance's working folder
links to the model's folder (``agent.runtimes.mlx``): a request for the served name then finds
the loaded model, and the answer carries the served name back. ``build_args`` is pure and
golden-tested; ``parse_args`` reads a running process's argv back; ``config_hash`` says when a
running model needs a restart. What a launch may not pass is ``agent.api.launch_policy``'s
(``MLX_DENIED_FLAGS``); the flags the builder sets itself are ``OWNED_VALUE_FLAGS`` here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.api.argv import (
    ParsedCommand,
    flag_setting,
    flag_values,
    read_back,
    scan,
    without_executable,
)

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class MlxSettings(BaseModel):
    """``mlx_lm.server`` settings; ``None`` means "leave mlx-lm's own default"."""

    model_config = ConfigDict(extra="forbid")

    # The union's tag (agent.api.runtimes.RuntimeSettings). Never sent or stored: an older agent refuses a
    # settings key it does not know, and the definition's own ``runtime`` says it.
    runtime: Literal["mlx"] = Field(default="mlx", exclude=True)

    max_tokens: int | None = flag_setting("--max-tokens", 512, "Default completion length.", "tokens",
                                      ge=1, le=1_048_576)
    temp: float | None = flag_setting("--temp", 0.0, "Default sampling temperature.", "", ge=0, le=10)
    top_p: float | None = flag_setting("--top-p", 1.0, "Default nucleus sampling top-p.", "", ge=0, le=1)
    top_k: int | None = flag_setting("--top-k", 0, "Default top-k sampling (0: off).", "tokens", ge=0, le=100_000)
    min_p: float | None = flag_setting("--min-p", 0.0, "Default min-p sampling (0: off).", "", ge=0, le=1)
    decode_concurrency: int | None = flag_setting("--decode-concurrency", 32,
                                              "Requests decoded together when they can be batched.",
                                              "requests", ge=1, le=1024)
    prompt_concurrency: int | None = flag_setting("--prompt-concurrency", 8,
                                              "Prompts processed together when they can be batched.",
                                              "requests", ge=1, le=1024)
    prefill_step_size: int | None = flag_setting("--prefill-step-size", 2048,
                                             "Prompt processing chunk (lower: smaller memory spikes).",
                                             "tokens", ge=1, le=1_048_576)
    prompt_cache_size: int | None = flag_setting("--prompt-cache-size", 10,
                                             "Distinct KV caches kept in the prompt cache.", "caches",
                                             ge=0, le=10_000)
    prompt_cache_bytes: int | None = flag_setting("--prompt-cache-bytes", "unlimited",
                                              "Most memory the prompt cache holds.", "bytes", ge=1)
    max_kv_size: int | None = flag_setting("--max-kv-size", "unlimited",
                                       "Most tokens one sequence's KV cache holds (a rotating cache).",
                                       "tokens", ge=1, le=4_194_304)
    draft_model: str | None = flag_setting("--draft-model", "none",
                                       "A smaller model's folder for speculative decoding (next to the model's "
                                       "folder).", "", min_length=1, max_length=4096)
    num_draft_tokens: int | None = flag_setting("--num-draft-tokens", 3,
                                            "Tokens drafted per step with a draft model.", "tokens", ge=1, le=64)
    adapter_path: str | None = flag_setting("--adapter-path", "none",
                                        "A LoRA adapter's folder (next to the model's folder).", "",
                                        min_length=1, max_length=4096)
    chat_template: str | None = flag_setting("--chat-template", "from model",
                                         "A chat template (Jinja text) for a model without one.", "",
                                         min_length=1, max_length=8192)
    use_default_chat_template: bool = Field(
        default=False, description="Use the tokenizer's default chat template when the model has none.",
        json_schema_extra={"flag": "--use-default-chat-template", "runtime_default": False, "unit": ""})
    chat_template_args: str | None = flag_setting("--chat-template-args", "{}",
                                              'Arguments for the chat template, a JSON object '
                                              '({"enable_thinking": false}).', "", max_length=8192)
    log_level: LogLevel | None = flag_setting("--log-level", "INFO", "mlx-lm's log level.")

    @field_validator("chat_template_args")
    @classmethod
    def _json_object(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"chat_template_args must be a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError("chat_template_args must be a JSON object")  # noqa: TRY004 - pydantic wants ValueError
        return json.dumps(parsed, sort_keys=True, separators=(",", ":"))  # one spelling, one hash


_FLAG_TO_FIELD: dict[str, str] = {
    (info.json_schema_extra or {})["flag"]: name  # type: ignore[index,misc]
    for name, info in MlxSettings.model_fields.items() if not info.exclude  # the union's tag has no flag
}
VALUE_FLAGS = frozenset(f for f, name in _FLAG_TO_FIELD.items() if name != "use_default_chat_template")
BOOL_FLAGS = frozenset({"--use-default-chat-template"})
# Flags that read a file or folder: the launch policy keeps them next to the model's folder.
PATH_FLAGS = frozenset({"--adapter-path", "--draft-model"})
# Flags the builder sets itself. ``launch_policy.MLX_DENIED_FLAGS`` refuses them in extra_args.
OWNED_VALUE_FLAGS = frozenset({"--model", "--host", "--port"})


def served_name_problem(served_name: str) -> str | None:
    """Why ``served_name`` cannot be the relative path ``--model`` names (None: it can be)."""
    parts = served_name.split("/")
    if (served_name.startswith("-") or "\\" in served_name or "\0" in served_name
            or any(p in ("", ".", "..") for p in parts)):
        return (f"served_name {served_name[:80]!r} cannot be served by MLX: mlx_lm.server takes the model's "
                "name as a relative path, so it may not start with '-', hold '\\', '.' or '..' parts, "
                "or empty parts")
    return None


def _coerce(name: str, raw: str) -> Any:
    annotation = MlxSettings.model_fields[name].annotation
    if annotation in (int, int | None):
        return int(raw)
    if annotation in (float, float | None):
        return float(raw)
    return raw


def _split(args: list[str], base: MlxSettings) -> ParsedCommand[MlxSettings]:
    found = scan(args, value_flags={flag: _FLAG_TO_FIELD[flag] for flag in VALUE_FLAGS},
                 bool_flags={flag: (_FLAG_TO_FIELD[flag], True) for flag in BOOL_FLAGS},
                 owned_value_flags=OWNED_VALUE_FLAGS, coerce=_coerce)
    return read_back(found, base, name_flags=("--model",))  # the model is a link named after it


def lift_extra_args(settings: MlxSettings, extra_args: list[str]) -> tuple[MlxSettings, list[str]]:
    """Move flags that have a typed field out of ``extra_args`` into the settings (last wins)."""
    parsed = _split(list(extra_args), settings)
    return parsed.settings, parsed.extra_args


def build_args(settings: MlxSettings, model_path: str, served_name: str, port: int,
               extra_args: list[str] | None = None, host: str = "127.0.0.1") -> list[str]:
    """The ``mlx_lm.server`` argv after the executable, in a fixed canonical order.

    ``--model`` is ``served_name``: the working folder links that name to ``model_path`` (see the
    module's text), so ``model_path`` itself is not on the command line.
    """
    del model_path  # the link in the working folder carries it (and config_hash hashes it)
    settings, rest = lift_extra_args(settings, list(extra_args or []))
    argv = ["--model", served_name, "--host", host, "--port", str(port)]
    for _name, flag, value in flag_values(settings):
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        elif value is not None:
            argv += [flag, str(value)]
    return argv + rest


def parse_args(argv: list[str]) -> ParsedCommand[MlxSettings]:
    """Read an argv (with or without the executable in front) back into settings."""
    return _split(without_executable(argv), MlxSettings())


def config_hash(settings: MlxSettings, model_path: str, served_name: str,
                extra_args: list[str] | None = None) -> str:
    """A short hash of the canonical argv and the model folder, port excluded: equal hashes run the
    same way."""
    argv = build_args(settings, model_path, served_name, 0, extra_args)
    digest = hashlib.sha256(json.dumps(["mlx", model_path, *argv]).encode()).hexdigest()
    return digest[:16]
