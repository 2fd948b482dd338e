"""The tuning search space for vLLM models, as pure functions.

Dimensions, in the order coordinate descent visits them (three phases): (1) KV-cache dtype
{fp8, auto} and prefix caching {on, off}; (2) max num seqs {4, 8, 16, 32, 64}, then max batched
tokens {2048 … 32768}; (3) speculative decoding {off, saved, MTP 1/2/3/5 or draft depths}, then
async scheduling {on, off}. Quick search visits max num seqs and speculative decoding; full search
visits every dimension. Candidates vary the model's ``vllm`` settings only, never max model len or
the memory budget; configurations that run the same way (equal fingerprint) are measured once.

Gates, decided without measuring, from what the daemon can know: the definition, the node's GPUs,
and the model's ``config.json`` when the model folder is readable from the daemon (``read_model_facts``;
a local node's absolute path). What is not known is not guessed: MTP depths need MTP layers
(``mtp_num_hidden_layers > 0``) or a saved MTP config; KV ``auto`` needs a budget that holds the
weights and one full-length request at the model's own dtype; draft depths need a saved draft model
(and the drafter's block size to go past its saved depth). Each gate that drops values says why in
the plan's notes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.api.vllm import SpeculativeSettings, VllmSettings
from daemon.jobs.dimension import Dimension

VLLM_QUICK = ("max_num_seqs", "speculative")
VLLM_FULL = ("kv_cache_dtype", "prefix_caching", "max_num_seqs", "max_num_batched_tokens", "speculative",
             "async_scheduling")
POOLING_DIMS = ("max_num_seqs", "max_num_batched_tokens")
MAX_NUM_SEQS = (4, 8, 16, 32, 64)
POOLING_NUM_SEQS = (4, 8, 16, 32, 64)
MAX_BATCHED_TOKENS = (2048, 4096, 8192, 16384, 32768)
MTP_DEPTHS = (1, 2, 3, 5)
DRAFT_DEPTHS = (3, 7, 11)
DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default, the budget without one of ours
RESERVE_GIB = 1.5  # activations, CUDA graphs and the runtime itself, on top of weights and KV
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp16": 2, "bf16": 2}
_POOLING_ARGS = {("--runner", "pooling"), ("--convert", "embed"), ("--convert", "classify"),
                 ("--task", "embed"), ("--task", "embedding"), ("--task", "score")}


@dataclass(frozen=True)
class ModelFacts:
    """What the model's own files say; every field ``None`` (or False) when they could not be read."""

    known: bool = False  # config.json was read
    mtp_layers: int | None = None
    max_position: int | None = None
    kv_bytes_per_token: int | None = None  # KV cache per token at the model's own dtype (kv auto)
    weights_bytes: int | None = None
    mamba: bool = False
    draft_block_size: int | None = None
    source: str = ""  # where the facts came from, or why there are none


@dataclass(frozen=True)
class VllmMachine:
    """What the vLLM search needs to know about the model and its node, without measuring."""

    saved: VllmSettings  # the normalized saved settings (the baseline, and the "saved" values)
    facts: ModelFacts = field(default_factory=ModelFacts)
    budget_gib: float | None = None  # the model's budget, else vLLM's default share of the GPU
    chunked_prefill: bool = True  # False when extra_args turn it off (--no-enable-chunked-prefill)
    pooling: bool = False

    @property
    def max_model_len(self) -> int | None:
        return self.saved.max_model_len or self.facts.max_position

    @property
    def mtp(self) -> bool:
        """MTP depths may be tried: the model has MTP layers, or its saved config already uses MTP."""
        saved_mtp = self.saved.speculative is not None and self.saved.speculative.method == "mtp"
        return bool(self.facts.mtp_layers) or saved_mtp

    @property
    def draft_model(self) -> str | None:
        spec = self.saved.speculative
        return spec.model if spec is not None and spec.model else None

    def auto_kv_fits(self) -> bool:
        """The budget holds the weights, one full-length request's KV at auto, and a reserve."""
        f, length = self.facts, self.max_model_len
        if self.budget_gib is None or f.kv_bytes_per_token is None or f.weights_bytes is None or not length:
            return False
        need = f.weights_bytes + f.kv_bytes_per_token * length + RESERVE_GIB * 2**30
        return need <= self.budget_gib * 2**30


def canonical(settings: VllmSettings) -> VllmSettings:
    """The settings with vLLM's exact defaults folded in (``kv_cache_dtype=auto`` is no flag)."""
    return settings.model_copy(update={"kv_cache_dtype": None}) if settings.kv_cache_dtype == "auto" else settings


def _describe_value(value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, SpeculativeSettings):
        method = value.method or ("draft_model" if value.model else "speculative")
        return f"{method}×{value.num_speculative_tokens}" if value.num_speculative_tokens else method
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def describe_vllm_change(change: dict[str, Any]) -> str:
    if set(change) == {"speculative"} and change["speculative"] is None:
        return "speculative=off"
    return ", ".join(f"{k}={_describe_value(v)}" for k, v in change.items())


def _kv(best: VllmSettings, m: VllmMachine) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"kv_cache_dtype": "fp8"}]
    if m.auto_kv_fits():
        out.append({"kv_cache_dtype": "auto"})
    return out


def _prefix(best: VllmSettings, m: VllmMachine) -> list[dict[str, Any]]:
    if m.facts.mamba:  # a hybrid's state cache follows prefix caching
        return [{"enable_prefix_caching": True, "mamba_cache_mode": "align"},
                {"enable_prefix_caching": False, "mamba_cache_mode": "none"}]
    return [{"enable_prefix_caching": True}, {"enable_prefix_caching": False}]


def _num_seqs(best: VllmSettings, m: VllmMachine) -> list[dict[str, Any]]:
    return [{"max_num_seqs": n} for n in (POOLING_NUM_SEQS if m.pooling else MAX_NUM_SEQS)]


def _batched_tokens(best: VllmSettings, m: VllmMachine) -> list[dict[str, Any]]:
    values = set(MAX_BATCHED_TOKENS)
    if m.saved.max_num_batched_tokens:
        values.add(m.saved.max_num_batched_tokens)
    if not m.chunked_prefill:  # without chunked prefill a step must hold a whole prompt
        length = m.max_model_len
        values = {v for v in values if length and v >= length}
        if m.saved.max_num_batched_tokens:
            values.add(m.saved.max_num_batched_tokens)
    return [{"max_num_batched_tokens": v} for v in sorted(values)]


def _speculative(best: VllmSettings, m: VllmMachine) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"speculative": None}]
    if m.saved.speculative is not None:
        out.append({"speculative": m.saved.speculative})
    if m.mtp:
        out += [{"speculative": SpeculativeSettings(method="mtp", num_speculative_tokens=n)} for n in MTP_DEPTHS]
    elif m.draft_model and m.facts.draft_block_size and m.saved.speculative is not None:
        cap = m.facts.draft_block_size
        out += [{"speculative": m.saved.speculative.model_copy(update={"num_speculative_tokens": n})}
                for n in DRAFT_DEPTHS if n <= cap]
    return out


def _async(best: VllmSettings, m: VllmMachine) -> list[dict[str, Any]]:
    return [{"async_scheduling": True}, {"async_scheduling": False}]


class VllmDimension(Dimension[VllmSettings, VllmMachine]):
    """A vLLM dimension: settings compared with vLLM's defaults folded in (``canonical``)."""

    def apply(self, best: VllmSettings, change: dict[str, Any]) -> VllmSettings:
        return VllmSettings.model_validate({**best.model_dump(), **{
            k: v.model_dump() if isinstance(v, SpeculativeSettings) else v for k, v in change.items()}})

    def same_as(self, settings: VllmSettings) -> VllmSettings:
        return canonical(settings)

    def describe(self, change: dict[str, Any]) -> str:
        return describe_vllm_change(change)

    def change(self, value: Any, m: VllmMachine) -> dict[str, Any]:
        """An explicit value: a raw change (a dict), or the dimension's own value."""
        if isinstance(value, dict):
            return value
        if self.name == "speculative":
            if value in ("off", None, 0):
                return {"speculative": None}
            if value == "saved":
                return {"speculative": m.saved.speculative}
            base = (m.saved.speculative if m.draft_model and m.saved.speculative is not None
                    else SpeculativeSettings(method="mtp"))
            return {"speculative": base.model_copy(update={"num_speculative_tokens": int(value)})}
        if self.name == "prefix_caching":
            return {"enable_prefix_caching": value in (True, "on", 1)}
        if self.name == "async_scheduling":
            return {"async_scheduling": value in (True, "on", 1)}
        return {self.name: value}


VLLM_DIMENSIONS: dict[str, VllmDimension] = {d.name: d for d in (
    VllmDimension("kv_cache_dtype", "Store the KV cache in 8 bits (fp8) or at the model's own dtype (auto).",
                  "fp8 holds about twice the tokens in the same memory; auto keeps full precision but fits fewer "
                  "requests.", _kv),
    VllmDimension("prefix_caching", "Reuse the KV cache of prompts that start the same way.",
                  "Repeated system prompts and agent turns start faster; bookkeeping costs a little on unique "
                  "prompts.", _prefix),
    VllmDimension("max_num_seqs", "Schedule more sequences in each step.",
                  "More sequences raise throughput under load but share the KV cache and can slow each one.",
                  _num_seqs),
    VllmDimension("max_num_batched_tokens", "Size the tokens each scheduler step processes.",
                  "Bigger steps prefill long prompts faster but make running generations wait longer.",
                  _batched_tokens),
    VllmDimension("speculative", "Propose several tokens per step and verify them at once (MTP or a draft).",
                  "Faster single-user generation when guesses land; wasted work and memory when they do not, "
                  "mostly under load.", _speculative),
    VllmDimension("async_scheduling", "Plan the next step while the GPU runs this one.",
                  "Less idle GPU time between steps; some features do not combine with it.", _async),
)}


def is_pooling(extra_args: Sequence[str], tags: Sequence[str] = ()) -> bool:
    """A pooling (embedding or scoring) model, from its runner flags or its tags."""
    pairs = set(itertools.pairwise(extra_args))
    inline = {tuple(a.split("=", 1)) for a in extra_args if "=" in a}
    return bool(_POOLING_ARGS & (pairs | inline)) or "embedding" in tags


def chunked_prefill(extra_args: Sequence[str]) -> bool:
    """False when extra_args turn chunked prefill off (the last spelling wins, as in vLLM)."""
    state = True
    for arg in extra_args:
        name = arg.replace("_", "-")
        if name == "--no-enable-chunked-prefill":
            state = False
        elif name == "--enable-chunked-prefill":
            state = True
    return state


def vllm_dimensions_for(search: str, explicit: Sequence[str] | None,
                        machine: VllmMachine) -> tuple[list[str], list[str]]:
    """(the steps of a run, notes on what the gates left out)."""
    names = list(explicit) if explicit else list(VLLM_QUICK if search == "quick" else VLLM_FULL)
    unknown = [n for n in names if n not in VLLM_DIMENSIONS]
    if unknown:
        raise ValueError(f"unknown tuning dimension(s) {unknown} for a vLLM model; known: {', '.join(VLLM_DIMENSIONS)}")
    notes: list[str] = []
    if machine.pooling:
        dropped = [n for n in names if n not in POOLING_DIMS]
        names = [n for n in names if n in POOLING_DIMS]
        if dropped:
            notes.append(f"A pooling model: only {', '.join(POOLING_DIMS)} are searched "
                         f"({', '.join(dropped)} left out).")
    return names, notes + gate_notes(names, machine)


def gate_notes(dims: Sequence[str], m: VllmMachine) -> list[str]:
    """Why values of the chosen dimensions are left out."""
    notes: list[str] = []
    facts_from = f" ({m.facts.source})" if m.facts.source else ""
    if "kv_cache_dtype" in dims and not m.auto_kv_fits():
        if not m.facts.known or m.budget_gib is None or not m.max_model_len:
            notes.append("KV cache auto is not tried: the memory it needs is not known"
                         f"{facts_from}; fp8 is always eligible.")
        else:
            notes.append(f"KV cache auto is not tried: {m.budget_gib:g} GiB does not hold the weights and one "
                         f"{m.max_model_len}-token request at the model's own dtype.")
    if "speculative" in dims:
        if not m.mtp:
            if not m.facts.known:
                notes.append(f"MTP depths are not tried: the model's config.json is not readable here{facts_from}, "
                             "and no saved MTP config proves MTP layers.")
            else:
                notes.append("MTP depths are not tried: the model has no MTP layers (mtp_num_hidden_layers is 0).")
        if m.draft_model and not m.mtp and not m.facts.draft_block_size:
            notes.append("Draft-model depths beyond the saved one are not tried: the drafter's block size is "
                         "not known (off and the saved depth only).")
        if not m.draft_model and not m.mtp:
            notes.append("Draft-model depths are not tried: no draft model is configured.")
    if "max_num_batched_tokens" in dims and not m.chunked_prefill:
        if m.max_model_len:
            notes.append(f"Chunked prefill is off: max batched tokens below max model len ({m.max_model_len}) "
                         "are not tried.")
        else:
            notes.append("Chunked prefill is off and max model len is not known: only the saved max batched "
                         "tokens is tried.")
    return notes


def count_vllm_candidates(dims: Sequence[str], machine: VllmMachine, values: dict[str, list[Any]],
                          limit: int) -> int:
    """Upper estimate of the candidates a run measures (every step on top of the saved settings)."""
    total = sum(len(VLLM_DIMENSIONS[d].variants(machine.saved, machine, values.get(d))) for d in dims)
    return min(total, limit)


def vllm_effective_config(settings: VllmSettings) -> str:
    """One line of the normalized settings that are set."""
    parts = []
    for name, value in canonical(settings).model_dump(exclude_none=True).items():
        if isinstance(value, dict):
            value = json.dumps({k: v for k, v in value.items() if v not in (None, {})}, sort_keys=True,
                               separators=(",", ":"))
        parts.append(f"{name}={value}")
    return " ".join(parts) or "vLLM defaults"


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def facts_from_config(config: dict[str, Any], weights_bytes: int | None, source: str = "") -> ModelFacts:
    """The facts a model's config.json gives (pure: tests pass the dict)."""
    c = _text_config(config)

    def num(*keys: str) -> int | None:
        for key in keys:
            value = c.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return None

    dtype = str(c.get("torch_dtype") or c.get("dtype") or "")
    width = _DTYPE_BYTES.get(dtype)
    layers, heads = num("num_hidden_layers", "n_layer", "num_layers"), num("num_attention_heads", "n_head")
    kv_heads = num("num_key_value_heads", "num_kv_heads") or heads
    hidden = num("hidden_size")
    head_dim = num("head_dim") or (hidden // heads if heads and hidden else None)
    kv: int | None = None
    if width and layers:
        lora, rope = num("kv_lora_rank"), num("qk_rope_head_dim")
        if lora:  # MLA: one compressed latent per token and layer
            kv = layers * (lora + (rope or 0)) * width
        elif kv_heads and head_dim:
            kv = 2 * layers * kv_heads * head_dim * width
    archs = [str(a) for a in c.get("architectures") or []]
    mamba = (any(k in c for k in ("hybrid_override_pattern", "layers_block_type")) or
             any("mamba" in k.lower() or k.lower().startswith("ssm") for k in c) or
             any("mamba" in a.lower() for a in archs))
    return ModelFacts(known=True, mtp_layers=num("mtp_num_hidden_layers", "num_nextn_predict_layers") or 0,
                      max_position=num("max_position_embeddings"), kv_bytes_per_token=kv,
                      weights_bytes=weights_bytes, mamba=mamba, draft_block_size=num("block_size"), source=source)


def read_model_facts(folder: Path | None) -> ModelFacts:
    """The facts of a model folder the daemon can read (its config.json and weights' sizes)."""
    if folder is None:
        return ModelFacts(source="the model folder is on its node, not readable from the daemon")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return ModelFacts(source=f"no readable config.json in {folder}: {type(exc).__name__}")
    if not isinstance(config, dict):
        return ModelFacts(source=f"{folder}/config.json is not an object")
    sizes = [p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file()]
    return facts_from_config(config, sum(sizes) if sizes else None, source=f"from {folder}/config.json")
