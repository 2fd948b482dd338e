"""The GGUF header reader against honest files, hostile ones, and a bounded fuzz run (scenario 20)."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.gguf_facts import shard_names, summarize
from agent.gguf_reader import (
    MAX_ARRAY,
    MAX_KV,
    MAX_TENSORS,
    GgufError,
    NeedMore,
    parse_header,
    read_header,
)
from tests.fakes.gguf_files import gguf_bytes, kv_bytes

FUZZ_CAP = 64 * 1024  # Ollama's cap for fuzz inputs
SEEDS = [gguf_bytes(), gguf_bytes(layers=1, embd=32, vocab=4, tied_output=True),
         gguf_bytes(arch="gemma3", layers=6, embd=32, extra={"gemma3.attention.sliding_window": 64})]


def _parse(data: bytes) -> object:
    return parse_header(data, len(data))


def _array(item_type: int, count: int, payload: bytes = b"") -> bytes:
    """A metadata item ``k`` holding an array (type 9) of ``count`` items of ``item_type``."""
    return struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, item_type, count) + payload


def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def test_an_honest_file_reads_like_the_gguf_package_reads_it(tmp_path: Path) -> None:
    from gguf import GGUFReader

    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(layers=3, embd=32, heads=4, kv_heads=2, vocab=8))
    ours = read_header(path)
    theirs = GGUFReader(str(path))
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    assert [t.n_bytes for t in ours.tensors] == [int(t.n_bytes) for t in theirs.tensors]
    assert ours.data_offset == theirs.data_offset
    summary = summarize(ours)
    assert (summary.architecture, summary.block_count, summary.head_count, summary.head_count_kv,
            summary.key_length, summary.vocab_size) == ("llama", 3, 4, [2, 2, 2], 8, 8)
    assert summary.layer_bytes == [32 * 32 * 4] * 3 and summary.output_tied is False


def test_the_real_gemma_header(gemma_gguf: Path) -> None:
    summary = summarize(read_header(gemma_gguf))
    assert (summary.architecture, summary.block_count, summary.context_length, summary.embedding_length) == (
        "gemma3", 18, 32768, 640)
    assert (summary.head_count, summary.head_count_kv[0], summary.key_length, summary.sliding_window) == (
        4, 1, 256, 512)
    assert summary.vocab_size == 262144 and summary.tensor_bytes == 246_587_904
    assert summary.swa_layers.count(False) == 3 and summary.output_tied  # every 6th layer is global


@pytest.mark.parametrize(("data", "says"), [
    (b"GGML" + bytes(40), "not a GGUF file"),
    (_header(0, 0, version=1), "version 1"),
    (_header(MAX_TENSORS + 1, 0), "tensor count"),
    (_header(0, MAX_KV + 1), "metadata count"),
    (_header(0, 1) + struct.pack("<Q", 1 << 40), "length of key"),
    (_header(0, 1) + kv_bytes("k", 1)[:-4].replace(struct.pack("<I", 4), struct.pack("<I", 99)) + bytes(4),
     "unknown value type"),
    (_header(0, 1) + _array(4, 1 << 62), "length of array"),
    (_header(0, 1) + _array(4, MAX_ARRAY), "truncated"),
    (_header(0, 1) + _array(8, 3, struct.pack("<Q", 1 << 62)), "length of an item"),
    (_header(0, 1) + _array(9, 2), "not a number or a string"),
    (_header(0, 1) + kv_bytes("general.alignment", 3), "power of two"),
])
def test_a_malformed_header_is_an_error_not_a_crash(data: bytes, says: str) -> None:
    with pytest.raises(GgufError, match=says):
        _parse(data)


def _one_tensor(dims: list[int], ttype: int = 0, offset: int = 0, extra: bytes = b"", data: int = 64) -> bytes:
    info = struct.pack("<Q", 1) + b"t" + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    body = _header(1 + (1 if extra else 0), 0) + info + struct.pack("<IQ", ttype, offset) + extra
    return body + bytes(-len(body) % 32) + bytes(data)


@pytest.mark.parametrize(("data", "says"), [
    (_one_tensor([4, 4], offset=1 << 40), "past the end of the file"),
    (_one_tensor([1 << 20, 1 << 20]), "past the end of the file"),
    (_one_tensor([4, 4], offset=8), "not aligned"),
    (_one_tensor([4, 4], ttype=250), "unknown type"),
    (_one_tensor([4, 4, 4, 4, 4]), "dimensions"),
    (_one_tensor([0, 4]), "out of range"),
    (_one_tensor([5], ttype=2), "impossible dimensions"),  # Q4_0 comes in blocks of 32
    (_one_tensor([4], extra=struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 4, 0, 0)), "appears twice"),
])
def test_tensor_infos_are_checked_against_the_file(data: bytes, says: str) -> None:
    with pytest.raises(GgufError, match=says):
        _parse(data)


def test_every_truncation_of_a_file_is_an_error() -> None:
    data = SEEDS[1]
    for cut in range(0, len(data) - 1, 7):
        with pytest.raises(GgufError):
            _parse(data[:cut])


def test_a_short_prefix_of_a_long_file_asks_for_more() -> None:
    data = SEEDS[0]
    with pytest.raises(NeedMore) as more:
        parse_header(data[:100], len(data))
    assert 100 < more.value.size <= len(data)


def test_split_shard_names() -> None:
    assert shard_names("m-00001-of-00003.gguf") == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert shard_names("m.gguf") == ["m.gguf"]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["byte", "u64", "cut", "insert"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "u64":  # counts and lengths are u64: make one huge, zero or off by a little
            value = draw(st.sampled_from([0, 1, 2**32 - 1, 2**63 - 1, 2**64 - 1, MAX_ARRAY, MAX_KV + 1]))
            data[at:at + 8] = struct.pack("<Q", value)
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(max_size=64))
    return bytes(data[:FUZZ_CAP])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fuzzed_headers_parse_or_fail_cleanly_within_bounded_memory(data: bytes) -> None:
    tracemalloc.start()
    try:
        try:
            header = _parse(data)
        except GgufError:
            header = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"the reader allocated {peak} bytes for a {len(data)}-byte input"
    if header is not None:  # what parses is consistent with the file it came from
        summarize(header)  # type: ignore[arg-type]
        assert all(t.offset + t.n_bytes <= len(data) for t in header.tensors)  # type: ignore[attr-defined]
