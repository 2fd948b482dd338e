"""What a launch may carry: runtime arguments and environment variables, checked before a spawn.

The daemon checks a definition with these rules when it is saved, judging paths by their text;
the agent checks the launch spec again with the same rules, judging paths on disk (symlinks
resolved). A refusal names the argument or variable and says why.

Arguments: flags that open the runtime to the network, run tools or commands, write files, load
code or download weights are refused outright; flags that read a file (a LoRA, a projector, a
chat template...) may only read from the model's own folder; a value that starts with ``-``
where a value is expected is refused (``--model=-oProxyCommand=x``), as is any NUL byte.
``DENIED_FLAGS`` is the one list of flags a launch may not pass (the agent's driver and the daemon
both refuse through ``check_extra_args``); the flags the argv builder sets itself and drops from
``extra_args`` are ``agent.api.llamacpp.OWNED_VALUE_FLAGS``/``OWNED_BOOL_FLAGS``. ``mlx_lm.server``
has its own lists (``MLX_DENIED_FLAGS``, ``MLX_PATH_FLAGS``; ``check_extra_args(..., runtime="mlx")``
and ``check_mlx_settings`` for its typed settings): its model is a folder, and an adapter or a draft
model may only be read from the folder that holds it. vLLM (``agent.api.vllm``) has
``VLLM_DENIED_FLAGS`` and ``VLLM_PATH_FLAGS`` (``runtime="vllm"``, ``check_vllm_settings``): it runs
in a container that sees the models folder at ``/models``, so a file it reads must lie under
``/models``, judged by text on both sides (the paths are the container's, not the node's).
Environment: only ``ENV_ALLOWLIST`` and ``GGML_*`` names, so nothing preloads code
(``LD_PRELOAD``, ``DYLD_*``, ``PYTHON*``), re-enables a refused flag (``LLAMA_ARG_*``) or redirects
the network (``HF_ENDPOINT``, ``*_PROXY``). vLLM also takes ``VLLM_*`` and ``NCCL_*`` tuning
variables, except names that point at files, plugins, hosts, ports or keys (``VLLM_ENV_DENIED_RE``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping

from agent.api import mlx, vllm
from agent.api.llamacpp import _VALUE_FLAGS, OWNED_VALUE_FLAGS
from agent.api.runtimes import profile, settings_type
from core.safe_names import folder_of, lexically_inside

ENV_ALLOWLIST = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL", "HSA_OVERRIDE_GFX_VERSION", "ONEAPI_DEVICE_SELECTOR",
    "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY",
    "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TZ",
})
ENV_ALLOWED_PREFIXES = ("GGML_",)
_ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
MAX_ENV_VALUE = 4096
MAX_ARG = 8192
MAX_ARGS = 256

_DENIED: dict[str, str] = {}
for _reason, _flags in {
    "opens the runtime to the network": ("--host", "--rpc", "--path", "--api-prefix", "--ui-mcp-proxy",
                                         "--webui-mcp-proxy", "--webui", "--ui", "--props"),
    "runs tools or commands": ("--tools", "--tools-runtime", "-ag", "--agent", "--mcp-servers-config",
                               "--mcp-servers-json", "--video-ffmpeg-dir", "--trust-remote-code"),
    "changes the runtime's credentials, which the agent owns": (
        "--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file", "-hft", "--hf-token"),
    "writes files outside the model": ("--log-file", "--slot-save-path", "--log-prompts-dir",
                                       "-lcd", "--lookup-cache-dynamic", "--media-path",
                                       "--ui-config-file", "--webui-config-file"),
    "downloads weights; add the model through MirbadLLM instead": (
        "-mu", "--model-url", "-mmu", "--mmproj-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
        "-hfv", "--hf-repo-v", "-hffv", "--hf-file-v", "-hfd", "-hfrd", "--hf-repo-draft",
        "--spec-draft-hf", "-dr", "--docker-repo", "--models-dir", "--models-preset"),
    "names the model, which the definition's model_path owns": ("-m", "--model"),
}.items():
    _DENIED.update(dict.fromkeys(_flags, _reason))
DENIED_FLAGS: Mapping[str, str] = _DENIED  # flag -> why; the one denylist of runtime flags
# llama-server presets that fetch a model from the internet.
_PRESET_DOWNLOAD_RE = re.compile(r"--(embd|fim|gpt|vision)-[a-z0-9.-]+-(default|spec)")

# Flags whose value is a file the runtime reads: allowed only inside the model's folder.
PATH_FLAGS = frozenset({
    "--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled", "-mm", "--mmproj",
    "--chat-template-file", "--grammar-file", "-jf", "--json-schema-file", "-md", "--model-draft",
    "--spec-draft-model", "-mv", "--model-vocoder", "-lcs", "--lookup-cache-static",
})
_SCALED_PATH_FLAGS = frozenset({"--lora-scaled", "--control-vector-scaled"})  # FNAME:SCALE,...
_LIST_PATH_FLAGS = frozenset({"--lora", "--control-vector"})  # comma-separated files
VALUE_FLAGS = frozenset(_VALUE_FLAGS) | OWNED_VALUE_FLAGS | PATH_FLAGS | {"--temp", "--top-k", "--top-p",
                                                                          "--min-p", "-n", "--n-predict"}

# mlx_lm.server (``agent.api.mlx``): the one denylist of its flags. It has no key, no file output
# and no download flag of its own; what it loads is the model folder, an adapter and a draft model.
MLX_DENIED_FLAGS: Mapping[str, str] = {
    "--host": "opens the runtime to the network",
    "--port": "picks the runtime's port, which the agent owns",
    "--model": "names the model, which the definition's model_path owns",
    "--trust-remote-code": "runs Python code that comes with the model",
}
MLX_PATH_FLAGS = mlx.PATH_FLAGS  # read from next to the model's folder only
MLX_VALUE_FLAGS = mlx.VALUE_FLAGS | mlx.OWNED_VALUE_FLAGS

# vLLM (``agent.api.vllm``): the one denylist of ``vllm serve`` flags, canonical spelling (``_`` is
# read as ``-``; a dotted ``--flag.key`` is judged as ``--flag``). An argument that is a prefix of a
# denied flag is refused too, since Python's argparse takes an unambiguous abbreviation.
# --trust-remote-code is refused as for llama.cpp: it runs the Python files that come with a
# downloaded model, with the GPUs and the network, where the image (chosen in the definition) is
# the code the operator picked; a model that needs it is not supported yet.
_VLLM_DENIED: dict[str, str] = {}
for _reason, _flags in {
    "opens the runtime to the network": (
        "--host", "--uds", "--headless", "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp",
        "--kv-transfer-config", "--kv-events-config", "--ec-transfer-config", "--allowed-origins",
        "--root-path", "--otlp-traces-endpoint", "--allowed-media-domains"),
    "picks the runtime's port, which the agent owns": ("--port",),
    "changes the runtime's credentials or TLS, which the agent owns": (
        "--api-key", "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-cert-reqs",
        "--enable-ssl-refresh", "--hf-token"),
    "runs code from outside the image": (
        "--trust-remote-code", "--middleware", "--tool-parser-plugin", "--reasoning-parser-plugin",
        "--worker-cls", "--worker-extension-cls", "--logits-processors", "--tool-server"),
    "reads more flags from a file, past these checks": ("--config",),
    "lets requests read files in the container": ("--allowed-local-media-path",),
    "downloads weights; add the model through MirbadLLM instead": ("--download-dir",),
    "names the model, which the definition's model_path and served_name own": ("--model", "--served-model-name"),
    "sets the memory share, which the definition's memory_budget_gib owns": (
        "--gpu-memory-utilization", "--kv-cache-memory-bytes"),
}.items():
    _VLLM_DENIED.update(dict.fromkeys(_flags, _reason))
VLLM_DENIED_FLAGS: Mapping[str, str] = _VLLM_DENIED
# Flags whose value is a file or folder vLLM reads (or, not being a path, a repo it would download):
# allowed only under /models. --chat-template and --generation-config also take a non-path value.
VLLM_PATH_FLAGS = frozenset({"--tokenizer", "--hf-config-path", "--chat-template", "--generation-config",
                             "--lora-modules"})
_VLLM_KNOWN = (frozenset(vllm.OWNED_BOOL_FLAGS) | frozenset(vllm.LIFTED_FLAGS) | VLLM_PATH_FLAGS
               | vllm.OWNED_VALUE_FLAGS)
VLLM_ENV_PREFIXES = ("VLLM_", "NCCL_")
VLLM_ENV_ALLOWLIST = frozenset({"PYTORCH_CUDA_ALLOC_CONF", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                "TORCH_CUDA_ARCH_LIST"})
VLLM_ENV_DENIED_RE = re.compile(r"PATH|DIR|ROOT|FILE|PLUGIN|_SO|LIB|KEY|TOKEN|SECRET|HOST|_IP|PORT|URL|"
                                r"ENDPOINT|PROXY|MODELSCOPE|INSECURE|DEV_MODE|RUNTIME_LORA|LOGGING_CONFIG")
_NUMBER_RE = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")

Inside = Callable[[str, str], bool]


class PolicyViolation(ValueError):
    """A runtime argument or environment variable that is not allowed; the message names it."""


# ggml's own switches that load code: a module path (``GGML_BACKEND_PATH`` is how the agent itself
# picks a GPU backend, ``agent.runtimes.backends``) or a folder of modules. A spec never sets them.
ENV_DENIED = frozenset({"GGML_BACKEND_PATH", "GGML_BACKEND_DIR"})


def env_allowed(name: str) -> bool:
    return name not in ENV_DENIED and (name in ENV_ALLOWLIST or name.startswith(ENV_ALLOWED_PREFIXES))


def vllm_env_allowed(name: str) -> bool:
    return env_allowed(name) or name in VLLM_ENV_ALLOWLIST or (
        name.startswith(VLLM_ENV_PREFIXES) and VLLM_ENV_DENIED_RE.search(name) is None)


def check_env(env: Mapping[str, str], runtime: str = "llamacpp") -> None:
    """Refuse a variable outside the allowlist (for ``runtime="vllm"``: with vLLM's tuning names)."""
    vllm_rules = profile(runtime).container  # vLLM's container takes its own tuning variables
    allowed = vllm_env_allowed if vllm_rules else env_allowed
    for name, value in env.items():
        if not isinstance(name, str) or _ENV_NAME_RE.fullmatch(name) is None or not allowed(name):
            if vllm_rules:
                raise PolicyViolation(
                    f"environment variable {str(name)[:80]!r} is not allowed for vLLM; allowed are "
                    f"{', '.join(sorted(ENV_ALLOWLIST | VLLM_ENV_ALLOWLIST))} and names starting with "
                    f"{', '.join(ENV_ALLOWED_PREFIXES + VLLM_ENV_PREFIXES)} that name no file, plugin, "
                    f"host, port or key")
            raise PolicyViolation(
                f"environment variable {str(name)[:80]!r} is not allowed for a runtime; allowed are "
                f"{', '.join(sorted(ENV_ALLOWLIST))} and names starting with {', '.join(ENV_ALLOWED_PREFIXES)} "
                f"but {', '.join(sorted(ENV_DENIED))} (they load code; the node's backend choice picks the GPU module)")
        if "\0" in value or len(value) > MAX_ENV_VALUE:
            raise PolicyViolation(f"environment variable {name!r} has a NUL byte or is too long")


def _split_flag(arg: str) -> tuple[str, str | None]:
    if arg.startswith("--") and "=" in arg:
        flag, value = arg.split("=", 1)
        return flag, value
    return arg, None


def _paths_in(flag: str, value: str) -> list[str]:
    if flag in _SCALED_PATH_FLAGS:
        return [item.rsplit(":", 1)[0] if re.search(r":[-+.\d]+$", item) else item
                for item in value.split(",")]
    if flag in _LIST_PATH_FLAGS:
        return value.split(",")
    return [value]


# Each native runtime's flags: (denied, taking a value, naming a file); vLLM's are judged apart.
_FLAG_RULES: dict[str, tuple[Mapping[str, str], frozenset[str], frozenset[str]]] = {
    "llamacpp": (DENIED_FLAGS, VALUE_FLAGS, PATH_FLAGS),
    "mlx": (MLX_DENIED_FLAGS, MLX_VALUE_FLAGS, MLX_PATH_FLAGS),
}


def check_extra_args(extra_args: Iterable[str], model_path: str, inside: Inside = lexically_inside,
                     runtime: str = "llamacpp") -> None:
    """Refuse ``extra_args`` that reach beyond the model; ``inside(folder, path)`` judges paths.

    ``runtime`` picks the flag lists: llama-server's (the default) or ``"mlx"`` (``MLX_*``); for
    MLX the model is a folder, and files may be read from the folder that holds it. For ``"vllm"``
    (``VLLM_*``) files may be read from under ``/models`` only, judged by text whatever ``inside``
    says, because the paths are the container's; ``model_path`` is not used."""
    rules = _FLAG_RULES.get(runtime)
    if rules is None:  # vLLM: paths inside its container, judged by text
        _check_vllm_args(list(extra_args))
    else:
        _check_args(list(extra_args), model_path, inside, *rules)


def _check_args(args: list[str], model_path: str, inside: Inside, denied: Mapping[str, str],
                value_flags: frozenset[str], path_flags: frozenset[str]) -> None:
    if len(args) > MAX_ARGS:
        raise PolicyViolation(f"too many extra arguments ({len(args)}; at most {MAX_ARGS})")
    folder = folder_of(model_path)
    i = 0
    while i < len(args):
        arg = args[i]
        if not isinstance(arg, str) or "\0" in arg or len(arg) > MAX_ARG:
            raise PolicyViolation("an extra argument contains a NUL byte or is too long")
        flag, inline = _split_flag(arg)
        if flag in denied:
            raise PolicyViolation(f"extra argument {flag} is not allowed: it {denied[flag]}")
        if _PRESET_DOWNLOAD_RE.fullmatch(flag):
            raise PolicyViolation(f"extra argument {flag} is not allowed: it downloads a model")
        if flag in value_flags:
            value = inline
            if value is None:
                if i + 1 >= len(args):
                    raise PolicyViolation(f"extra argument {flag} needs a value")
                i += 1
                value = args[i]
            if "\0" in value:
                raise PolicyViolation(f"the value of {flag} contains a NUL byte")
            if value.startswith("-") and (flag in path_flags or not _NUMBER_RE.fullmatch(value)):
                raise PolicyViolation(f"the value of {flag} may not start with '-': {value[:60]!r}")
            if flag in path_flags:
                for path in _paths_in(flag, value):
                    if not inside(folder, path):
                        raise PolicyViolation(
                            f"{flag} may only read files in the model's folder ({folder}); "
                            f"{path[:200]!r} is outside it")
        i += 1


def check_mlx_settings(settings: mlx.MlxSettings, model_path: str, inside: Inside = lexically_inside) -> None:
    """``mlx_lm.server``'s typed settings, judged as the same flags in ``extra_args`` would be (an
    adapter or a draft model from next to the model's folder only)."""
    argv = mlx.build_args(settings, model_path, "-", 0)
    _check_args(argv[len(mlx.OWNED_VALUE_FLAGS) * 2:], model_path, inside, MLX_DENIED_FLAGS,
                MLX_VALUE_FLAGS, MLX_PATH_FLAGS)


def _vllm_denied(flag: str) -> str | None:
    """Why a vLLM flag (canonical spelling) is refused, or None; a prefix of a refused flag counts."""
    if flag in VLLM_DENIED_FLAGS:
        return VLLM_DENIED_FLAGS[flag]
    if flag.startswith("--") and len(flag) > 3 and flag not in _VLLM_KNOWN:
        for denied, reason in VLLM_DENIED_FLAGS.items():
            if denied.startswith(flag):
                return f"{reason} (argparse reads it as {denied})"
    return None


def _in_models_mount(path: str) -> bool:
    return path.startswith(vllm.MODELS_MOUNT + "/") and lexically_inside(vllm.MODELS_MOUNT, path)


def _vllm_paths(flag: str, value: str) -> list[str]:
    """The paths in a vLLM path flag's value (none where the value is not a path)."""
    if flag == "--chat-template" and any(c in value for c in "{}\n"):
        return []  # an inline template, not a file
    if flag == "--generation-config" and value in ("auto", "vllm"):
        return []
    if flag == "--lora-modules":
        if value.lstrip().startswith("{"):
            try:
                obj = json.loads(value)
            except json.JSONDecodeError as exc:
                raise PolicyViolation(f"--lora-modules needs name=path or a JSON object: {value[:80]!r}") from exc
            path = obj.get("path") if isinstance(obj, dict) else None
            if not isinstance(path, str):
                raise PolicyViolation(f"--lora-modules needs a path: {value[:80]!r}")
            return [path]
        return [value.split("=", 1)[1] if "=" in value else value]
    return [value]


def _check_vllm_args(args: list[str]) -> None:
    if len(args) > MAX_ARGS:
        raise PolicyViolation(f"too many extra arguments ({len(args)}; at most {MAX_ARGS})")
    i = 0
    while i < len(args):
        arg = args[i]
        if not isinstance(arg, str) or "\0" in arg or len(arg) > MAX_ARG:
            raise PolicyViolation("an extra argument contains a NUL byte or is too long")
        raw_flag, inline = vllm.split_option(arg)
        flag = vllm.flag_name(raw_flag).split(".", 1)[0]
        reason = _vllm_denied(flag)
        if reason is not None:
            raise PolicyViolation(f"extra argument {raw_flag} is not allowed: it {reason}")
        if flag in VLLM_PATH_FLAGS:
            values = [inline] if inline is not None else []
            if inline is None:  # --lora-modules takes several; the others one
                while i + 1 < len(args) and not args[i + 1].startswith("-"):
                    i += 1
                    values.append(args[i])
                    if flag != "--lora-modules":
                        break
            if not values:
                raise PolicyViolation(f"extra argument {raw_flag} needs a value")
            for value in values:
                for path in _vllm_paths(flag, value):
                    if not _in_models_mount(path):
                        raise PolicyViolation(f"{raw_flag} may only read from the models folder "
                                              f"({vllm.MODELS_MOUNT}/...); {path[:200]!r} is outside it")
        i += 1
    try:
        vllm.normalize(vllm.VllmSettings(), args)  # an owned flag it cannot read is refused here
    except ValueError as exc:
        raise PolicyViolation(str(exc)) from exc


def check_vllm_settings(settings: vllm.VllmSettings, extra_args: Iterable[str] = ()) -> None:
    """vLLM's typed settings as they take effect with ``extra_args`` (a draft model under /models
    only: a name that is no path there would be downloaded); an unreadable owned flag is refused."""
    try:
        effective, _ = vllm.normalize(settings, list(extra_args))
    except ValueError as exc:
        raise PolicyViolation(str(exc)) from exc
    draft = effective.speculative.model if effective.speculative is not None else None
    if draft is not None and not _in_models_mount(draft):
        raise PolicyViolation(f"speculative model {draft[:200]!r} must be a folder under {vllm.MODELS_MOUNT}/ "
                              f"(the models folder as the container sees it)")


def check_launch(runtime: str, extra_args: Iterable[str], env: Mapping[str, str], model_path: str,
                 inside: Inside = lexically_inside, *, vllm_settings: vllm.VllmSettings | None = None) -> None:
    """Every check of a launch's arguments and environment for ``runtime``, in one call (the
    daemon on save, the agent's driver again before a start); typed MLX settings are checked by
    ``check_mlx_settings``."""
    args = list(extra_args)
    check_extra_args(args, model_path, inside, runtime=runtime)
    own = vllm_settings if vllm_settings is not None else settings_type(runtime)()
    if isinstance(own, vllm.VllmSettings):
        check_vllm_settings(own, args)
    check_env(env, runtime=runtime)
