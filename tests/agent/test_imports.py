"""Imports from an Ollama store and from a folder: digests checked before paths (scenario 9), every
blob verified where we hold it, hostile names refused before anything exists (scenario 8)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent.api.client import AgentError
from agent.api.sources import FolderImportRequest, OllamaImportRequest, TransferState
from tests.agent._sources_support import SourcesAgent, sources_agent
from tests.agent.test_downloads import files_under, finished
from tests.fakes.gguf_files import gguf_bytes, write_gguf

MODEL, PROJECTOR = gguf_bytes(), gguf_bytes(arch="clip", layers=1)


def ollama_store(root: Path, name: str = "tiny", tag: str = "latest", *, digests: dict[str, str] | None = None,
                 projector: bool = True) -> Path:
    """An Ollama models folder holding ``name:tag``; ``digests`` overrides a layer's digest."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    layers = []
    for media, data in [("model", MODEL), ("projector", PROJECTOR), ("template", b"{{ .Prompt }}")]:
        if media == "projector" and not projector:
            continue
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest.replace(":", "-")).write_bytes(data)
        layers.append({"mediaType": f"application/vnd.ollama.image.{media}",
                       "digest": (digests or {}).get(media, digest), "size": len(data)})
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return root


@pytest.fixture
async def agent(tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> AsyncIterator[SourcesAgent]:
    async with sources_agent(tmp_path, fake_runtime(), port_base) as running:
        yield running


async def _import(agent: SourcesAgent, **request: object):  # type: ignore[no-untyped-def]
    started = await agent.client.import_ollama(OllamaImportRequest(**request))  # type: ignore[arg-type]
    return await finished(agent.client, started.id)


async def test_an_ollama_model_is_linked_verified_and_listed(agent: SourcesAgent, tmp_path: Path) -> None:
    store = ollama_store(tmp_path / "ollama")
    listed = await agent.client.ollama_models(str(store))
    assert [(m.model, m.has_projector) for m in listed] == [("tiny:latest", True)]
    info = await _import(agent, model="tiny", store=str(store))
    assert info.state is TransferState.DONE, info.error
    model = info.result[0]
    blob = store / "blobs" / ("sha256-" + hashlib.sha256(MODEL).hexdigest())
    assert os.stat(model.model_path).st_ino == blob.stat().st_ino  # a hard link, no copy
    assert Path(model.projector_path or "").read_bytes() == PROJECTOR
    assert (model.name, model.origin) == ("tiny-latest", "ollama:tiny") and not any(
        ".partial" in f for f in files_under(agent.models_dir))


async def test_copy_mode_copies(agent: SourcesAgent, tmp_path: Path) -> None:
    store = ollama_store(tmp_path / "ollama", projector=False)
    info = await _import(agent, model="tiny:latest", store=str(store), copy_files=True)
    model = info.result[0]
    assert os.stat(model.model_path).st_nlink == 1 and Path(model.model_path).read_bytes() == MODEL
    assert model.projector_path is None


@pytest.mark.parametrize("digest", ["sha256:abc", "sha256:" + "a" * 65, "sha256:../../../outside",
                                    "sha256-../../x", "sha256:" + "A" * 64])
async def test_a_malformed_digest_is_refused_before_a_path_is_built(
        agent: SourcesAgent, tmp_path: Path, digest: str) -> None:
    store = ollama_store(tmp_path / "ollama", digests={"model": digest})
    (tmp_path / "outside").write_bytes(MODEL)  # where a traversal would land
    info = await _import(agent, model="tiny", store=str(store))
    assert info.state is TransferState.FAILED and "is not sha256:<64 hex digits>" in (info.error or "")
    assert files_under(agent.models_dir) == []


async def test_a_tampered_blob_fails_its_digest_and_leaves_nothing(agent: SourcesAgent, tmp_path: Path) -> None:
    store = ollama_store(tmp_path / "ollama")
    blob = store / "blobs" / ("sha256-" + hashlib.sha256(MODEL).hexdigest())
    os.chmod(blob, 0o644)
    blob.write_bytes(bytes(len(MODEL)))
    info = await _import(agent, model="tiny", store=str(store))
    assert info.state is TransferState.FAILED and "does not match its digest" in (info.error or "")
    assert files_under(agent.models_dir) == []


@pytest.mark.parametrize("name", ["../x", "library/../../x:latest", "x:../y", "a/b/c/d", "x\0", "x:" + "t" * 200,
                                  "C:\\x", "\\\\host\\share\\x"])
async def test_hostile_ollama_names_are_refused_at_once(agent: SourcesAgent, tmp_path: Path, name: str) -> None:
    before = files_under(tmp_path)
    with pytest.raises(AgentError) as caught:
        await agent.client._call("POST", "/imports/ollama", body={"model": name, "store": str(tmp_path)})
    assert caught.value.status == 422 and files_under(tmp_path) == before


async def test_a_folder_of_gguf_files_is_registered_where_it_is(agent: SourcesAgent, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    write_gguf(folder / "alpha.gguf")
    write_gguf(folder / "beta-Q4_K_M.gguf", layers=1)
    write_gguf(folder / "mmproj-f16.gguf", arch="clip")
    (folder / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (folder / "notes.txt").write_text("hello")
    started = await agent.client.import_folder(FolderImportRequest(folder=str(folder)))
    info = await finished(agent.client, started.id)
    assert info.state is TransferState.DONE, info.error
    assert [(m.name, Path(m.model_path).name) for m in info.result] == [("alpha", "alpha.gguf"),
                                                                         ("beta-q4-k-m", "beta-Q4_K_M.gguf")]
    assert all(m.projector_path == str(folder / "mmproj-f16.gguf") for m in info.result)
    assert files_under(agent.models_dir) == []  # nothing was copied
    for bad in ("relative/folder", str(tmp_path / "missing")):
        with pytest.raises(AgentError) as caught:
            await agent.client.import_folder(FolderImportRequest(folder=bad))
        assert caught.value.status in (404, 422)


async def test_lm_studio_models_are_listed_one_row_per_gguf_with_the_folder_projector(
        agent: SourcesAgent, tmp_path: Path) -> None:
    current, older = tmp_path / "lmstudio" / "models", tmp_path / "cache" / "lm-studio" / "models"
    qwen = current / "lmstudio-community" / "Qwen3-4B-GGUF"
    write_gguf(qwen / "Qwen3-4B-Q4_K_M.gguf")
    write_gguf(qwen / "mmproj-Qwen3-4B-F16.gguf", arch="clip")
    write_gguf(older / "bartowski" / "big-GGUF" / "big-Q8_0-00001-of-00002.gguf")
    write_gguf(older / "bartowski" / "big-GGUF" / "big-Q8_0-00002-of-00002.gguf")
    (current / "loose.gguf").write_bytes(MODEL)  # not under publisher/model: not LM Studio's layout
    assert agent.deps.sources is not None
    agent.deps.sources.lmstudio_folders = [current, older, tmp_path / "missing"]
    listed = await agent.client.lmstudio_models()
    assert [(m.model, m.projector_path) for m in listed] == [
        ("lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf", str(qwen / "mmproj-Qwen3-4B-F16.gguf")),
        ("bartowski/big-GGUF/big-Q8_0-00001-of-00002.gguf", None)]
    assert listed[0].path == str(qwen / "Qwen3-4B-Q4_K_M.gguf") and listed[0].size > 0
