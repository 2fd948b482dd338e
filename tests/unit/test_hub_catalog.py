"""The curated catalog that ships with the product, its short names, the fit it shows, and the quants
read from a repository's file names."""

from __future__ import annotations

import json
import re

import pytest

from agent.api.models import GpuInfo
from daemon.api.catalog import (
    CATALOG_FILE,
    GB,
    catalog_entries,
    catalog_view,
    judge,
    needed_bytes,
)
from daemon.api.hub import (
    MACHINE_CLASSES,
    CatalogEntry,
    HubFile,
    is_short_name,
    resolve_short_name,
)
from daemon.api.models import HostSnapshot
from daemon.sources.quants import group_ggufs, quant_of


def test_every_entry_of_the_catalog_file_is_complete_and_well_formed() -> None:
    raw = json.loads(CATALOG_FILE.read_text(encoding="utf-8"))["entries"]
    entries = catalog_entries()
    assert len(entries) == len(raw) >= 12
    for entry in raw:
        assert set(CatalogEntry.model_fields) - {"vision"} <= set(entry), entry.get("name")
        CatalogEntry.model_validate(entry)  # patterns of name, repo and file; sizes > 0; a known class
    names = [e.name for e in entries]
    assert len(set(names)) == len(names), "short names must be unique"
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.\-]*:[a-z0-9][a-z0-9.\-]*", n) for n in names)
    assert len({(e.repo, e.file) for e in entries}) == len(entries)
    for entry in entries:
        assert entry.quant.lower() in entry.file.lower(), entry.name
        assert quant_of(entry.file) == entry.quant.upper(), entry.name  # the Discover page shows the same label
        assert not entry.file.startswith("mmproj"), entry.name


def test_each_machine_class_has_a_few_models_that_fit_it() -> None:
    bounds = {key: bound for key, _title, bound in MACHINE_CLASSES}
    for key, _title, bound in MACHINE_CLASSES:
        members = [e for e in catalog_entries() if e.machine == key]
        assert len(members) >= 2, key
        if bound is not None:
            assert all(needed_bytes(e.size) <= bound * GB for e in members), key
    assert set(bounds) == {e.machine for e in catalog_entries()}


@pytest.mark.parametrize(("name", "repo", "file"), [
    ("gemma3:1b", "ggml-org/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf"),
    ("Qwen3:4B", "Qwen/Qwen3-4B-GGUF", "Qwen3-4B-Q4_K_M.gguf"),
    ("llama3.2:3b", "bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf"),
])
def test_short_names_resolve_to_a_repository_and_a_file(name: str, repo: str, file: str) -> None:
    assert is_short_name(name)
    entry = resolve_short_name(list(catalog_entries()), name)
    assert entry is not None and (entry.ref().repo, entry.ref().file) == (repo, file)


def test_a_repository_reference_is_not_a_short_name() -> None:
    assert not is_short_name("ggml-org/gemma-3-1b-it-GGUF:Q4_K_M")
    assert not is_short_name("gemma3")
    assert resolve_short_name(list(catalog_entries()), "nothing:1b") is None


def test_the_fit_is_judged_against_the_gpus_else_the_system_memory() -> None:
    assert judge(4 * GB, 24 * GB, 64 * GB)[0] == "fits"
    state, note = judge(20 * GB, 8 * GB, 64 * GB)
    assert state == "tight" and "partly on the CPU" in note
    assert judge(60 * GB, 8 * GB, 16 * GB)[0] == "too_big"
    assert judge(4 * GB, 0, 16 * GB)[0] == "fits"
    assert judge(12 * GB, 0, 16 * GB)[0] == "too_big"
    assert judge(1 * GB, 0, 0)[0] == "unknown"

    gpu = GpuInfo(index=0, name="RTX 4090", memory_total=24 * GB)
    view = catalog_view([HostSnapshot(node="local", memory_total=32 * GB, gpus=[gpu])])
    by_name = {e.name: e for e in view.entries}
    assert (view.memory, view.memory_kind) == (24 * GB, "gpu")
    assert by_name["gemma3:1b"].fit == "fits" and by_name["gpt-oss:120b"].fit == "too_big"
    mac = GpuInfo(index=0, name="Apple M2", memory_total=16 * GB, unified_memory=True)
    assert catalog_view([HostSnapshot(node="local", memory_total=16 * GB, gpus=[mac])]).memory_kind == "system"


@pytest.mark.parametrize(("path", "quant"), [
    ("Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"),
    ("qwen2.5-coder-7b-instruct-q4_k_m.gguf", "Q4_K_M"),
    ("Meta-Llama-3.1-8B-Instruct-IQ2_XXS.gguf", "IQ2_XXS"),
    ("gemma-3-27b-it-BF16-00001-of-00002.gguf", "BF16"),
    ("gpt-oss-20b-mxfp4.gguf", "MXFP4"),
    ("Q8_0/model-00001-of-00003.gguf", "Q8_0"),
    ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "Q4_K_XL"),
    ("model.gguf", None),
])
def test_the_quant_is_read_from_the_file_name_else_its_folder(path: str, quant: str | None) -> None:
    assert quant_of(path) == quant


def test_shards_are_one_model_and_an_incomplete_split_is_left_out() -> None:
    files = [HubFile(path=p, size=s) for p, s in [
        ("m-Q8_0-00002-of-00002.gguf", 5), ("m-Q8_0-00001-of-00002.gguf", 7), ("m-Q4_0.gguf", 3),
        ("m-F16-00001-of-00003.gguf", 9), ("mmproj-m-f16.gguf", 2), ("README.md", 1), ("model.gguf", 4)]]
    quants, projectors = group_ggufs(files)
    assert [(q.quant, q.file, q.size) for q in quants] == [
        ("Q4_0", "m-Q4_0.gguf", 3), ("model.gguf", "model.gguf", 4), ("Q8_0", "m-Q8_0-00001-of-00002.gguf", 12)]
    assert [f.path for f in quants[2].files] == ["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]
    assert [p.path for p in projectors] == ["mmproj-m-f16.gguf"]
