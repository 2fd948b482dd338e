"""Getting models through the real daemon and its agent child: hostile definitions refused when
saved and again by the agent (scenarios 8, 13, 14), admission with force, "will it fit", and
downloads and imports that end as registered models, their progress as events (scenario 10)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import HfFileRef
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import ModelSource, ModelState
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    FolderImportQuery,
    OllamaImportQuery,
    Transfer,
)
from tests.agent._sources_support import processes_running
from tests.agent.test_imports import ollama_store
from tests.daemon.harness import model, running_daemon
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes, write_gguf

HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"model_path": "../x.gguf"}, "must be absolute"),
    ({"model_path": "D:x.gguf"}, "must be absolute"),
    ({"model_path": "\\\\host\\share\\m.gguf"}, "UNC"),
    ({"model_path": "/models/../etc/passwd"}, "'..'"),
    ({"model_path": "/models/m\0.gguf"}, "NUL"),
    ({"extra_args": ["--trust-remote-code"]}, "--trust-remote-code"),
    ({"extra_args": ["--tools", "all"]}, "--tools"),
    ({"extra_args": ["-ag"]}, "-ag"),
    ({"extra_args": ["--rpc", "1.2.3.4:50052"]}, "--rpc"),
    ({"extra_args": ["--host", "0.0.0.0"]}, "--host"),
    ({"extra_args": ["--slot-save-path", "/"]}, "--slot-save-path"),
    ({"extra_args": ["--log-file", "/tmp/log"]}, "--log-file"),
    ({"extra_args": ["--api-key", "mine"]}, "--api-key"),
    ({"extra_args": ["--model=-oProxyCommand=x"]}, "--model"),
    ({"extra_args": ["--chat-template-file", "/etc/passwd"]}, "--chat-template-file"),
    ({"extra_args": ["--lora", "/home/someone/evil.gguf"]}, "--lora"),
    ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, "LD_PRELOAD"),
    ({"env": {"PYTHONOPTIMIZE": "1"}}, "PYTHONOPTIMIZE"),
    ({"env": {"LLAMA_ARG_TOOLS": "all"}}, "LLAMA_ARG_TOOLS"),
    ({"env": {"VLLM_SERVER_DEV_MODE": "1"}}, "VLLM_SERVER_DEV_MODE"),
    ({"env": {"HF_ENDPOINT": "http://127.0.0.1"}}, "HF_ENDPOINT"),
    ({"env": {"HTTPS_PROXY": "http://evil"}}, "HTTPS_PROXY"),
    ({"sources": ModelSource(hf_repo="acme/x", hf_file="../../etc/passwd")}, "sources"),
]


@pytest.fixture
def hf_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The agent child inherits these: the fake hub is set per test through ``HF_ENDPOINT``."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield


async def transfer_end(client: DaemonClient, transfer_id: str, since: int = 0, timeout: float = 60) -> tuple[
        Transfer, list[str]]:
    """Follow the event feed until the transfer finishes; the transfer and the states it went through."""
    states: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = await client.events(since, timeout=5)
        since = page.last_id
        for event in page.events:
            if event.type == "transfer.state" and event.data.get("id") == transfer_id:
                states.append(event.data["state"])
                if event.data["state"] in ("done", "failed", "cancelled"):
                    return Transfer.model_validate(event.data), states
    raise AssertionError(f"transfer {transfer_id} did not finish: {states}")


async def test_hostile_definitions_are_refused_when_saved(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        for fields, names in HOSTILE:
            with pytest.raises(DaemonError) as caught:
                await d.client.create_model(model("m", str(model_file)).model_copy(update=fields))
            assert (caught.value.status, caught.value.code) == (422, "invalid_model"), fields
            assert names in caught.value.message, (names, caught.value.message)
        assert await d.client.list_models() == []
        good = await d.client.create_model(model("m", str(model_file)))
        with pytest.raises(DaemonError) as caught:
            await d.client.update_model(good.definition.model_copy(update={"extra_args": ["--tools", "all"]}))
        assert caught.value.status == 422
        assert (await d.client.get_model("m")).definition.extra_args == []


async def test_the_agent_checks_again_what_the_daemon_stored(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        stored = d.daemon.registry.require("m")  # as if models.json had been edited by hand
        d.daemon.registry._models["m"] = stored.model_copy(update={"extra_args": ["--rpc", "10.0.0.9:50052"],
                                                                   "env": {"LD_PRELOAD": "/tmp/x.so"}})
        with pytest.raises(DaemonError) as caught:
            await d.client.start_model("m")
        assert (caught.value.status, caught.value.code) == (422, "spec_rejected")
        assert processes_running(model_file) == []


async def test_admission_refuses_with_the_numbers_and_force_starts_anyway(
        tmp_path: Path, fake_runtime: Path) -> None:
    big = write_gguf(tmp_path / "models" / "big.gguf", layers=32, embd=4096, heads=32, kv_heads=32,
                     ctx=1 << 20, tensor_dim=32)  # a million tokens of context: 512 GiB of KV cache
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("big", str(big), settings={"ctx_size": 1 << 20}))
        with pytest.raises(DaemonError) as caught:
            await d.client.start_model("big")
        assert (caught.value.status, caught.value.code) == (409, "insufficient_memory")
        assert "GiB" in caught.value.message and "reserve" in caught.value.message
        refused = (await d.client.get_model("big")).status  # failed, saying why; nothing started
        assert refused.state == ModelState.FAILED and refused.error.startswith("The start was refused: ")
        assert processes_running(big) == []
        report = await d.client.fit(FitQuery(model_path=str(big), settings=LlamaCppSettings(ctx_size=1 << 20)))
        assert report.fits is False and 0 < report.max_ctx_size < 1 << 20
        status = await d.client.start_model("big", wait=True, force=True)
        assert status.state == ModelState.READY


async def test_will_it_fit_by_query_string(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        async with d.client.session.get(f"{d.url}/api/fit", params={"path": str(model_file), "ctx_size": "1024"},
                                        headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as resp:
            body = await resp.json()
        assert resp.status == 200 and body["fits"] is True and body["estimate"]["ctx_size"] == 1024
        with pytest.raises(DaemonError) as caught:
            await d.client.fit(FitQuery(node="elsewhere", model_path=str(model_file)))
        assert caught.value.code == "node_unknown"


async def test_a_hub_download_becomes_a_registered_model(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", gguf_bytes() + bytes(200_000), chunk_delay=0.002)
    hub.add("acme/tiny-GGUF", "mmproj-tiny-f16.gguf", gguf_bytes(arch="clip"))
    try:
        async with running_daemon(tmp_path / "home", fake_runtime) as d:
            since = (await d.client.status()).last_event_id
            fit = await d.client.fit(FitQuery(hf=HfFileRef(repo="acme/tiny-GGUF", quant="Q4_K_M")))
            assert fit.fits and fit.source == "hf:acme/tiny-GGUF/tiny-Q4_K_M.gguf"
            started = await d.client.download(DownloadQuery(hf=HfFileRef(repo="acme/tiny-GGUF", quant="Q4_K_M"),
                                                            model_id="tiny", tags=["downloaded"]))
            assert started.node == "local"
            done, states = await transfer_end(d.client, started.id, since)
            assert done.state.value == "done" and states[0] == "queued" and done.registered == ["tiny"]
            page = await d.client.events(since, timeout=0)
            assert any(e.type == "model.added" and e.model == "tiny" for e in page.events)
            view = await d.client.get_model("tiny")
            assert view.definition.extra_args[0] == "--mmproj" and view.definition.tags == ["downloaded"]
            source = view.definition.sources  # its origin: what a model update checks (daemon.sources.updates)
            assert source is not None and source.model_dump(exclude={"files"}) == ModelSource(
                hf_repo="acme/tiny-GGUF", hf_file="tiny-Q4_K_M.gguf",
                revision="0123456789abcdef0123456789abcdef01234567").model_dump(exclude={"files"})
            assert sorted(f.path for f in source.files) == ["mmproj-tiny-f16.gguf", "tiny-Q4_K_M.gguf"]
            assert (await d.client.transfer(started.id)).registered == ["tiny"]
            assert (await d.client.start_model("tiny", wait=True)).state == ModelState.READY
    finally:
        await hub.close()


async def test_the_demo_model_from_the_hub_is_registered_with_the_demo_settings(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.api.demo_model import (
        DEMO_HF_FILE,
        DEMO_HF_REPO,
        DEMO_MODEL_ID,
        demo_definition,
    )

    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add(DEMO_HF_REPO, DEMO_HF_FILE, gguf_bytes())
    try:
        async with running_daemon(tmp_path / "home", fake_runtime) as d:
            since = (await d.client.status()).last_event_id
            started = await d.client.download(DownloadQuery(hf=HfFileRef(repo=DEMO_HF_REPO, file=DEMO_HF_FILE),
                                                            model_id=DEMO_MODEL_ID, preset="demo"))
            done, _states = await transfer_end(d.client, started.id, since)
            assert done.registered == [DEMO_MODEL_ID], done.error or done.register_error
            got = (await d.client.get_model(DEMO_MODEL_ID)).definition
            assert got.settings == demo_definition("x").settings and got.tags == ["demo", "chat"]
            assert got.sources is not None and got.sources.hf_repo == DEMO_HF_REPO
            assert (await d.client.start_model(DEMO_MODEL_ID, wait=True)).state == ModelState.READY
    finally:
        await hub.close()


async def test_an_ollama_import_and_a_cancel_through_the_daemon(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ollama_store(tmp_path / "ollama", name="tiny", tag="1b")
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add("acme/slow", "slow.gguf", gguf_bytes() + bytes(4_000_000), chunk_delay=0.05)
    try:
        async with running_daemon(tmp_path / "home", fake_runtime) as d:
            assert [m.model for m in await d.client.ollama_models(store=str(store))] == ["tiny:1b"]
            since = (await d.client.status()).last_event_id
            started = await d.client.import_ollama(OllamaImportQuery(model="tiny:1b", store=str(store)))
            done, _states = await transfer_end(d.client, started.id, since)
            assert done.registered == ["tiny-1b"], done.error or done.register_error
            folder = tmp_path / "mine"
            write_gguf(folder / "alpha.gguf")
            write_gguf(folder / "beta.gguf")
            since = (await d.client.status()).last_event_id
            started = await d.client.import_folder(FolderImportQuery(folder=str(folder), tags=["mine"]))
            done, _states = await transfer_end(d.client, started.id, since)
            assert done.registered == ["alpha", "beta"]
            assert (await d.client.get_model("beta")).definition.model_path == str(folder / "beta.gguf")
            write_gguf(folder / "gamma.gguf")
            since = (await d.client.status()).last_event_id
            again = await d.client.import_folder(FolderImportQuery(folder=str(folder)))
            done, _states = await transfer_end(d.client, again.id, since)
            assert done.registered == ["gamma"] and done.existing == ["alpha", "beta"], done
            assert sorted(m.definition.id for m in await d.client.list_models()
                          if m.definition.model_path.startswith(str(folder))) == ["alpha", "beta", "gamma"]
            slow = await d.client.download(DownloadQuery(hf=HfFileRef(repo="acme/slow", file="slow.gguf")))
            while (await d.client.transfer(slow.id)).bytes_done == 0:
                await d.client.events((await d.client.status()).last_event_id, timeout=1)
            cancelled = await d.client.cancel_transfer(slow.id)
            assert cancelled.state.value == "cancelled" and cancelled.registered == []
            agent_models = tmp_path / "home" / "agent" / "models"
            assert not [p for p in agent_models.rglob("*") if ".partial" in p.name or p.name == "slow.gguf"]
    finally:
        await hub.close()
