"""Discover through the real daemon against the fake hub: a search, a repository's GGUF models by
quant, and each way the hub says no (nothing found, no GGUF, gated, private, not answering)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.api.client import DaemonClient, DaemonError
from tests.daemon.harness import running_daemon
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes


def add_bartowski(hub: FakeHub) -> None:
    repo = "bartowski/Qwen3-8B-GGUF"
    hub.describe(repo, downloads=90_000, likes=120, updated="2025-05-02T10:00:00.000Z")
    hub.add(repo, "Qwen3-8B-Q4_K_M.gguf", gguf_bytes() + bytes(5000))
    hub.add(repo, "Qwen3-8B-Q8_0-00001-of-00002.gguf", gguf_bytes() + bytes(7000))
    hub.add(repo, "Qwen3-8B-Q8_0-00002-of-00002.gguf", bytes(6000))
    hub.add(repo, "mmproj-Qwen3-8B-f16.gguf", gguf_bytes())
    hub.add(repo, "README.md", b"# Qwen3", lfs=False)
    hub.describe("unsloth/Qwen3-8B-GGUF", downloads=150_000, likes=300, gated="manual")
    hub.add("unsloth/Qwen3-8B-GGUF", "Q4_K_M/Qwen3-8B-UD-Q4_K_XL.gguf", gguf_bytes())
    hub.describe("Qwen/Qwen3-8B", downloads=1_000_000, likes=900)
    hub.add("Qwen/Qwen3-8B", "model-00001-of-00004.safetensors", bytes(100))
    hub.add("Qwen/Qwen3-8B", "config.json", b"{}", lfs=False)


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[FakeHub]:
    fake = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", fake.hub_url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    add_bartowski(fake)
    yield fake
    await fake.close()


@pytest.fixture
async def client(tmp_path: Path, hub: FakeHub) -> AsyncIterator[DaemonClient]:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        yield rd.client


async def test_a_search_answers_the_gguf_repositories_most_downloaded_first(
        client: DaemonClient, hub: FakeHub) -> None:
    found = await client.hub_search("qwen3 8b")
    assert [r.id for r in found.repos] == ["unsloth/Qwen3-8B-GGUF", "bartowski/Qwen3-8B-GGUF"]  # not the safetensors
    first, second = found.repos
    assert (first.downloads, first.likes, first.gated) == (150_000, 300, True)
    assert second.updated is not None and second.updated.year == 2025 and not second.gated
    assert found.message is None
    [asked] = [s for s in hub.requests("hub", "GET") if s.path == "/api/models"]
    assert asked.headers.get("Authorization") is None

    safetensors = await client.hub_search("qwen3", fmt="safetensors", limit=5)
    assert [r.id for r in safetensors.repos] == ["Qwen/Qwen3-8B"]
    assert len((await client.hub_search("qwen3", limit=1)).repos) == 1


async def test_a_search_without_hits_says_what_to_try(client: DaemonClient) -> None:
    found = await client.hub_search("no-such-model-anywhere")
    assert found.repos == [] and found.message is not None
    assert "no GGUF repository" in found.message and "no-such-model-anywhere" in found.message
    with pytest.raises(DaemonError) as caught:
        await client.hub_search("   ")
    assert (caught.value.status, caught.value.code) == (400, "invalid_parameter")
    with pytest.raises(DaemonError) as caught:
        await client.hub_search("qwen", fmt="onnx")  # type: ignore[arg-type]
    assert "format must be one of gguf, mlx, safetensors" in caught.value.message


async def test_a_repository_lists_its_models_by_quant_with_sizes_shards_and_projector(
        client: DaemonClient) -> None:
    files = await client.hub_repo_files("bartowski/Qwen3-8B-GGUF")
    assert [(q.quant, q.file, len(q.files)) for q in files.quants] == [
        ("Q4_K_M", "Qwen3-8B-Q4_K_M.gguf", 1), ("Q8_0", "Qwen3-8B-Q8_0-00001-of-00002.gguf", 2)]
    q4, q8 = files.quants
    assert q4.size == len(gguf_bytes()) + 5000
    assert q8.size == len(gguf_bytes()) + 7000 + 6000  # both shards
    assert [p.path for p in files.projectors] == ["mmproj-Qwen3-8B-f16.gguf"]
    assert (files.downloads, files.likes, files.gated, files.note) == (90_000, 120, False, None)

    gated = await client.hub_repo_files("unsloth/Qwen3-8B-GGUF")
    assert [q.quant for q in gated.quants] == ["Q4_K_XL"]
    assert gated.gated and gated.note is not None and "HF_TOKEN" in gated.note


async def test_each_refusal_of_the_hub_is_said_plainly(client: DaemonClient, hub: FakeHub) -> None:
    with pytest.raises(DaemonError) as caught:
        await client.hub_repo_files("Qwen/Qwen3-8B")
    assert (caught.value.status, caught.value.code) == (404, "no_gguf_files")
    assert "holds no GGUF model" in caught.value.message and "safetensors" in caught.value.message

    hub.describe("meta-llama/Llama-3.3-GGUF")
    hub.add("meta-llama/Llama-3.3-GGUF", "llama-Q4_K_M.gguf", gguf_bytes())
    hub.refused.add("meta-llama/Llama-3.3-GGUF")
    with pytest.raises(DaemonError) as caught:
        await client.hub_repo_files("meta-llama/Llama-3.3-GGUF")
    assert (caught.value.status, caught.value.code) == (403, "repo_gated")
    assert "accept its license" in caught.value.message.lower() and "HF_TOKEN" in caught.value.message

    hub.private.add("bartowski/Qwen3-8B-GGUF")
    for repo in ("bartowski/Qwen3-8B-GGUF", "nobody/nothing"):
        with pytest.raises(DaemonError) as caught:
            await client.hub_repo_files(repo)
        assert (caught.value.status, caught.value.code) == (404, "repo_not_found"), repo
    with pytest.raises(DaemonError) as caught:
        await client.hub_repo_files("bad/..")
    assert caught.value.status in (400, 422)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_hub_that_does_not_answer_is_named(client: DaemonClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    for call in (client.hub_search("qwen"), client.hub_repo_files("bartowski/Qwen3-8B-GGUF")):
        with pytest.raises(DaemonError) as caught:
            await call
        assert (caught.value.status, caught.value.code) == (502, "hub_unreachable")
        assert "cannot reach the Hugging Face hub" in caught.value.message


async def test_the_catalog_is_served_with_a_fit_per_entry(client: DaemonClient) -> None:
    view = await client.hub_catalog()
    names = [e.name for e in view.entries]
    assert "gemma3:1b" in names and "qwen3:4b" in names and "llama3.2:3b" in names
    assert view.memory_kind == "unknown" and {e.fit for e in view.entries} == {"unknown"}  # no local agent here
