"""Tiny GGUF files for tests: valid ones with chosen shapes, and the bytes to break on purpose.

``gguf_bytes(layers=2, embd=64, ...)`` is a complete GGUF v3 model of a few tens of KiB (F32
zeros), enough for the header reader, the memory estimate and the fake runtime, which never
looks inside. The writer is our own so tests can also write what no honest writer would.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

_LOGGER = logging.getLogger(__name__)

U8, I32, U32, F32, BOOL, STRING, ARRAY, U64 = 0, 5, 4, 6, 7, 8, 9, 10
F32_TYPE = 0


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(value: Any) -> tuple[int, bytes]:
    if isinstance(value, bool):
        return BOOL, struct.pack("<?", value)
    if isinstance(value, int):
        return U32, struct.pack("<I", value)
    if isinstance(value, float):
        return F32, struct.pack("<f", value)
    if isinstance(value, str):
        return STRING, _string(value)
    if isinstance(value, list):
        if value and isinstance(value[0], str):
            return ARRAY, struct.pack("<IQ", STRING, len(value)) + b"".join(_string(v) for v in value)
        if value and isinstance(value[0], bool):
            return ARRAY, struct.pack("<IQ", BOOL, len(value)) + b"".join(struct.pack("<?", v) for v in value)
        return ARRAY, struct.pack("<IQ", I32, len(value)) + b"".join(struct.pack("<i", v) for v in value)
    raise TypeError(value)


def kv_bytes(key: str, value: Any) -> bytes:
    vtype, payload = _value(value)
    return _string(key) + struct.pack("<I", vtype) + payload


def gguf_bytes(*, arch: str = "llama", layers: int = 2, embd: int = 64, heads: int = 4, kv_heads: int = 2,
               ctx: int = 2048, vocab: int = 16, ffn: int = 128, name: str = "tiny test model",
               extra: dict[str, Any] | None = None, alignment: int = 32, version: int = 3,
               tied_output: bool = False, tensor_dim: int | None = None) -> bytes:
    """A GGUF model; ``tensor_dim`` keeps the tensors small while the metadata claims a big model."""
    meta: dict[str, Any] = {
        "general.architecture": arch, "general.name": name, f"{arch}.block_count": layers,
        f"{arch}.context_length": ctx, f"{arch}.embedding_length": embd, f"{arch}.feed_forward_length": ffn,
        f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": kv_heads,
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)],
    }
    if alignment != 32:
        meta["general.alignment"] = alignment
    meta.update(extra or {})
    dim = tensor_dim or embd
    tensors: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (dim, vocab))]
    tensors += [(f"blk.{i}.attn_q.weight", (dim, dim)) for i in range(layers)]
    tensors += [("output_norm.weight", (dim,))]
    if not tied_output:
        tensors += [("output.weight", (dim, vocab))]
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    head += b"".join(kv_bytes(k, v) for k, v in meta.items())
    offset = 0
    infos = b""
    for tensor_name, dims in tensors:
        size = 4
        for d in dims:
            size *= d
        infos += _string(tensor_name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", F32_TYPE, offset)
        offset += -(-size // alignment) * alignment
    header = head + infos
    header += b"\0" * (-len(header) % alignment)
    return header + b"\0" * offset


def write_gguf(path: Path, **shape: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(**shape))
    return path
