"""A bounded reader of GGUF headers: metadata and tensor infos, never the weights.

GGUF files come from strangers, and loaders have been broken by their headers (huge counts that
allocate without limit, offsets past the end of the file: ollama#17042, CVE-2026-7482). This
reader trusts nothing: every count, length and offset is checked against a cap and against the
real file size *before* anything is allocated or read, and a bad header raises ``GgufError`` with
what was wrong. The ``gguf`` package's own reader is not used for this: it maps the whole file and
builds objects for every array element (11 s for a 250 MB model), and it was not written for
hostile input. Only its table of tensor type sizes is used, imported when the first tensor is read
(``gguf`` pulls in numpy and yaml: a quarter second the agent's start does not pay).

The parser works on a prefix of the file: ``parse_header(prefix, file_size)`` raises ``NeedMore``
when the header runs beyond the prefix, so the same code serves a local file and HTTP range reads.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 16  # the largest MoE files hold a few thousand
MAX_ARRAY = 1 << 24
MAX_STRING = 16 << 20
MAX_NAME = 1024
MAX_DIMS = 4
MAX_HEADER_BYTES = 64 << 20
MAX_KEPT_ARRAY = 4096  # numeric arrays up to this length keep their values (per-layer head counts)
FIRST_READ = 1 << 20
DEFAULT_ALIGNMENT = 32
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@cache
def _type_sizes() -> dict[int, tuple[int, int]]:
    """Tensor type -> (elements per block, bytes per block), from the ``gguf`` package's table."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    return {t.value: GGML_QUANT_SIZES[t] for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


class GgufError(ValueError):
    """The file is not a GGUF file, or its header is malformed; the message says where."""


class NeedMore(Exception):
    """The header continues beyond the bytes given; read at least ``size`` bytes and parse again."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    type: int
    offset: int  # from the start of the data section
    n_bytes: int


@dataclass
class GgufHeader:
    version: int
    file_size: int
    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


class _Cursor:
    def __init__(self, buf: bytes, file_size: int) -> None:
        self.buf, self.file_size, self.pos = buf, file_size, 0

    def take(self, n: int, what: str) -> int:
        """Claim ``n`` bytes at the cursor; the offset where they start."""
        start, end = self.pos, self.pos + n
        if end > self.file_size:
            raise GgufError(f"truncated: {what} needs {n} bytes at offset {start}, the file has {self.file_size}")
        if end > MAX_HEADER_BYTES:
            raise GgufError(f"header is larger than {MAX_HEADER_BYTES >> 20} MiB ({what} at offset {start})")
        if end > len(self.buf):
            raise NeedMore(end)
        self.pos = end
        return start

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def count(self, limit: int, what: str) -> int:
        value = int(self.scalar("<Q", what))
        if value > limit:
            raise GgufError(f"{what} is {value}, more than the limit of {limit}")
        return value

    def string(self, what: str, limit: int = MAX_STRING) -> str:
        length = self.count(limit, f"length of {what}")
        start = self.take(length, what)
        return self.buf[start:start + length].decode("utf-8", "replace")

    def skip_strings(self, count: int, key: str) -> None:
        """Step over ``count`` strings (a vocabulary: 256k of them) without decoding them."""
        buf, pos, have = self.buf, self.pos, min(len(self.buf), self.file_size, MAX_HEADER_BYTES)
        done = 0
        while done < count and pos + 8 <= have:
            (length,) = struct.unpack_from("<Q", buf, pos)
            if length > MAX_STRING or pos + 8 + length > have:
                break
            pos += 8 + length
            done += 1
        self.pos = pos
        for _ in range(count - done):  # the slow path raises the precise error, or NeedMore
            self.take(self.count(MAX_STRING, f"length of an item of {key}"), f"an item of {key}")


def _value(cur: _Cursor, vtype: int, key: str, header: GgufHeader) -> Any:
    if vtype in _SCALARS:
        return cur.scalar(_SCALARS[vtype], key)
    if vtype == _STRING:
        return cur.string(key)
    if vtype != _ARRAY:
        raise GgufError(f"metadata {key!r} has unknown value type {vtype}")
    item_type = int(cur.scalar("<I", f"item type of {key}"))
    count = cur.count(MAX_ARRAY, f"length of array {key}")
    header.array_lengths[key] = count
    if item_type == _STRING:
        cur.skip_strings(count, key)
        return None
    if item_type not in _SCALARS:
        raise GgufError(f"array {key!r} has item type {item_type}, which is not a number or a string")
    fmt = _SCALARS[item_type]
    size = struct.calcsize(fmt)
    start = cur.take(count * size, f"array {key}")
    if count > MAX_KEPT_ARRAY:
        return None
    return list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, start))


def _tensor(cur: _Cursor, index: int) -> TensorInfo:
    name = cur.string(f"name of tensor {index}", MAX_NAME)
    n_dims = int(cur.scalar("<I", f"dimension count of {name}"))
    if not 1 <= n_dims <= MAX_DIMS:
        raise GgufError(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    dims = tuple(int(cur.scalar("<Q", f"a dimension of {name}")) for _ in range(n_dims))
    ttype = int(cur.scalar("<I", f"type of {name}"))
    offset = int(cur.scalar("<Q", f"offset of {name}"))
    sizes = _type_sizes()
    if ttype not in sizes:
        raise GgufError(f"tensor {name!r} has unknown type {ttype}")
    if any(d < 1 or d > 1 << 40 for d in dims):
        raise GgufError(f"tensor {name!r} has a dimension out of range: {dims}")
    elements = math.prod(dims)
    block, type_size = sizes[ttype]
    if elements > 1 << 50 or dims[0] % block:
        raise GgufError(f"tensor {name!r} has impossible dimensions {dims} for type {ttype}")
    return TensorInfo(name, dims, ttype, offset, elements // block * type_size)


def parse_header(prefix: bytes, file_size: int) -> GgufHeader:
    """Parse the header in ``prefix`` (the first bytes of a file of ``file_size`` bytes)."""
    cur = _Cursor(prefix, file_size)
    if bytes(prefix[cur.take(4, "magic"):4]) != MAGIC:
        raise GgufError("not a GGUF file (the first bytes are not 'GGUF')")
    version = int(cur.scalar("<I", "version"))
    if version not in VERSIONS:
        raise GgufError(f"GGUF version {version} is not supported (only {VERSIONS})")
    n_tensors = cur.count(MAX_TENSORS, "tensor count")
    n_kv = cur.count(MAX_KV, "metadata count")
    header = GgufHeader(version=version, file_size=file_size)
    for i in range(n_kv):
        key = cur.string(f"key of metadata item {i}", MAX_NAME)
        vtype = int(cur.scalar("<I", f"value type of {key}"))
        header.metadata[key] = _value(cur, vtype, key, header)
    alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 \
            or alignment > 1 << 20 or alignment & (alignment - 1):
        raise GgufError(f"general.alignment {alignment!r} is not a power of two up to 1 MiB")
    header.alignment = alignment
    names: set[str] = set()
    for i in range(n_tensors):
        tensor = _tensor(cur, i)
        if tensor.name in names:
            raise GgufError(f"tensor {tensor.name!r} appears twice")
        names.add(tensor.name)
        header.tensors.append(tensor)
    header.data_offset = -(-cur.pos // alignment) * alignment
    _check_layout(header)
    return header


def _check_layout(header: GgufHeader) -> None:
    """Every tensor lies inside the file, aligned, and no two overlap."""
    room = header.file_size - header.data_offset
    end = 0
    for tensor in sorted(header.tensors, key=lambda t: t.offset):
        if tensor.offset % header.alignment:
            raise GgufError(f"tensor {tensor.name!r} is not aligned to {header.alignment} bytes")
        if tensor.offset < end:
            raise GgufError(f"tensor {tensor.name!r} overlaps the tensor before it")
        end = tensor.offset + tensor.n_bytes
        if end > room:
            raise GgufError(f"tensor {tensor.name!r} extends past the end of the file "
                            f"({header.data_offset + end} > {header.file_size} bytes)")


def _next_size(need: int, have: int, file_size: int) -> int:
    if need > MAX_HEADER_BYTES:
        raise GgufError(f"header is larger than {MAX_HEADER_BYTES >> 20} MiB")
    return min(file_size, MAX_HEADER_BYTES, max(need, have * 4, FIRST_READ))


def read_header(path: str | os.PathLike[str]) -> GgufHeader:
    """The header of a local GGUF file (blocking: run it in a thread)."""
    size = Path(path).stat().st_size
    with open(path, "rb") as fh:
        prefix = fh.read(min(size, FIRST_READ))
        while True:
            try:
                return parse_header(prefix, size)
            except NeedMore as more:
                fh.seek(0)
                prefix = fh.read(_next_size(more.size, len(prefix), size))


async def read_header_ranged(fetch: Callable[[int, int], Awaitable[bytes]], file_size: int) -> GgufHeader:
    """The header of a remote file through ``fetch(start, end_exclusive)`` range reads."""
    prefix = await fetch(0, min(file_size, FIRST_READ))
    while True:
        try:
            return parse_header(prefix, file_size)
        except NeedMore as more:
            size = _next_size(more.size, len(prefix), file_size)
            prefix += await fetch(len(prefix), size)
            if len(prefix) < size:
                raise GgufError("the server sent fewer bytes than asked for the header") from None
