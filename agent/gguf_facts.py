"""From a GGUF header to the facts that decide memory: layers, heads, window, weights per layer.

Metadata keys are ``{architecture}.{name}``. Several are per layer in some models (KV heads in
OpenELM, the sliding-window pattern in newer ones) and are read either way. Where llama.cpp fixes
a model family's sliding-window pattern in code instead of the file, ``SWA_PERIODS`` repeats it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from agent.api.sources import GgufKind, GgufSummary, lora_problem
from agent.gguf_reader import GgufHeader

# llama.cpp's set_swa_pattern(n): layer i uses the window unless i % n == n - 1.
SWA_PERIODS = {"gemma2": 2, "gemma3": 6, "gemma-embedding": 6, "cohere2": 4, "gpt-oss": 2, "exaone4": 4}
# Types llama.cpp's CPU backend repacks into an interleaved second copy (x86 AVX2 and ARM NEON).
REPACKED_TYPES = frozenset({2, 12, 20})  # Q4_0, Q4_K, IQ4_NL
_LAYER_RE = re.compile(r"blk\.(\d+)\.")
PROJECTOR_ARCHS = frozenset({"clip", "mmproj"})
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"  # the default template; named ones are tokenizer.chat_template.NAME


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _per_layer(value: Any, layers: int) -> list[int] | None:
    """A per-layer figure stored as one number or as an array of one per layer."""
    if isinstance(value, list):
        numbers = [_int(v) for v in value[:layers]]
        if len(numbers) == layers and all(n is not None for n in numbers):
            return [int(n) for n in numbers if n is not None]
        return None
    single = _int(value)
    return [single] * layers if single is not None else None


def _swa_layers(meta: dict[str, Any], arch: str, layers: int, window: int | None) -> list[bool]:
    if not window:
        return [False] * layers
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) >= layers:
        return [bool(p) for p in pattern[:layers]]
    period = _int(pattern) or SWA_PERIODS.get(arch)
    if not period:  # a window but no known pattern: count every layer as full (the larger figure)
        return [False] * layers
    return [i % period < period - 1 for i in range(layers)]


def summarize(header: GgufHeader, extra_shard_bytes: int = 0) -> GgufSummary:
    """The summary of one GGUF file; ``extra_shard_bytes`` (file sizes) adds a split model's other shards."""
    meta = header.metadata
    arch = str(meta.get("general.architecture") or "unknown")[:64]
    layers = max(0, min(_int(meta.get(f"{arch}.block_count")) or 0, 4096))
    head_count = _per_layer(meta.get(f"{arch}.attention.head_count"), layers) if layers else None
    heads = max(head_count) if head_count else None
    kv = _per_layer(meta.get(f"{arch}.attention.head_count_kv"), layers) if layers else None
    embd = _int(meta.get(f"{arch}.embedding_length"))
    key_len = _int(meta.get(f"{arch}.attention.key_length")) or (embd // heads if embd and heads else None)
    value_len = _int(meta.get(f"{arch}.attention.value_length")) or key_len
    window = _int(meta.get(f"{arch}.attention.sliding_window"))
    layer_bytes = [0] * layers
    embedding = output = repack = 0
    has_output = False
    for tensor in header.tensors:
        match = _LAYER_RE.match(tensor.name)
        if match and int(match.group(1)) < layers:
            layer_bytes[int(match.group(1))] += tensor.n_bytes
        elif tensor.name.startswith("output"):
            output += tensor.n_bytes
            has_output = has_output or tensor.name == "output.weight"
        else:
            embedding += tensor.n_bytes
        if tensor.type in REPACKED_TYPES and not tensor.name.startswith("token_embd"):
            repack += tensor.n_bytes
    tensor_bytes = header.tensor_bytes + extra_shard_bytes
    file_size = header.file_size + extra_shard_bytes
    if extra_shard_bytes and layers:  # weights of the other shards, spread like those of this one
        share = extra_shard_bytes // layers
        layer_bytes = [b + share for b in layer_bytes]
    return GgufSummary(
        architecture=arch, name=str(meta.get("general.name") or "")[:200], file_size=file_size,
        tensor_bytes=tensor_bytes, tensor_count=len(header.tensors), block_count=layers,
        parameter_count=None if (_int(meta.get("split.count")) or 1) > 1 else sum(math.prod(t.dims) for t in header.tensors),
        context_length=_int(meta.get(f"{arch}.context_length")), embedding_length=embd,
        feed_forward_length=_first(meta.get(f"{arch}.feed_forward_length")),
        head_count=heads, head_count_kv=kv or ([heads] * layers if heads else []),
        key_length=key_len, value_length=value_len, sliding_window=window,
        swa_layers=_swa_layers(meta, arch, layers, window),
        vocab_size=header.array_lengths.get("tokenizer.ggml.tokens"),
        file_type=_int(meta.get("general.file_type")),
        split_count=max(1, _int(meta.get("split.count")) or 1),
        is_projector=arch in PROJECTOR_ARCHS or str(meta.get("general.type") or "") == "mmproj",
        layer_bytes=layer_bytes, output_bytes=output, output_tied=not has_output and layers > 0,
        embedding_bytes=embedding, repack_bytes=repack, has_chat_template=has_chat_template(header),
        kind=GgufKind(general_type=_text(meta.get("general.type")), adapter_type=_text(meta.get("adapter.type"))))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:64]


def has_chat_template(header: GgufHeader) -> bool:
    """Whether the file carries its own chat template; a base model has none and only continues text."""
    template = header.metadata.get(CHAT_TEMPLATE_KEY)
    return isinstance(template, str) and bool(template.strip())


def _first(value: Any) -> int | None:
    if isinstance(value, list):
        numbers = [n for n in (_int(v) for v in value) if n is not None]
        return max(numbers) if numbers else None
    return _int(value)


SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


def shard_names(file_name: str) -> list[str]:
    """All shard file names of a split GGUF (``x-00001-of-00003.gguf``), or just this one."""
    match = SPLIT_RE.match(file_name)
    if not match:
        return [file_name]
    count = int(match.group("count"))
    if not 1 <= count <= 999:
        return [file_name]
    return [f"{match.group('stem')}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def architecture(header: GgufHeader) -> str:
    return str(header.metadata.get("general.architecture") or "unknown")[:64]


def adapter_problem(adapter: GgufHeader, base_architecture: str) -> str | None:
    """Why a GGUF file is no LoRA adapter for a model of ``base_architecture`` (None: it is one);
    the reasons are ``agent.api.sources.lora_problem``'s, which the daemon also asks on save."""
    meta = adapter.metadata
    return lora_problem(_text(meta.get("general.type")), _text(meta.get("adapter.type")), architecture(adapter),
                        base_architecture)
