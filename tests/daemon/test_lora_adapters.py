"""LoRA adapters chosen per request: each adapter is a model of its own on /v1, served by its base
model's runtime with llama-server's ``lora`` field applying only it; the base applies none."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ModelDefinition, ModelState
from daemon.models.registry import Registry, RegistryError
from daemon.validation import DefinitionRejected, check_definition
from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import write_gguf

LORA = {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": 16.0}


def _with_adapters(*adapters: dict[str, object], **fields: object) -> ModelDefinition:
    return model("base", "/models/base.gguf", adapters=list(adapters), **fields)


@pytest.mark.parametrize(("adapter", "fields", "reason"), [
    ({"name": "base", "file": "/models/a.gguf"}, {}, "the name is already a served name of this model"),
    ({"name": "BASE", "file": "/models/a.gguf"}, {}, "the name is already a served name of this model"),
    ({"name": "a", "file": "/elsewhere/a.gguf"}, {}, "--lora may only read files in the model's folder"),
    ({"name": "a", "file": "models/a.gguf"}, {}, "absolute"),
    ({"name": "a", "file": "/models/a,b.gguf"}, {}, "splits --lora at commas"),
    ({"name": "a\n", "file": "/models/a.gguf"}, {}, "control character"),
    ({"name": "a", "file": "/models/a.gguf"}, {"runtime": "mlx", "model_path": "/models/base"},
     "only llama.cpp takes LoRA adapters"),
])
def test_an_adapter_that_reaches_beyond_its_model_is_refused_on_save(
        adapter: dict[str, object], fields: dict[str, object], reason: str) -> None:
    with pytest.raises(DefinitionRejected) as refused:
        check_definition(_with_adapters(adapter, **fields))
    assert str(refused.value).startswith("adapters: ") and reason in str(refused.value)


def test_two_adapters_of_one_model_may_not_share_a_name() -> None:
    with pytest.raises(DefinitionRejected, match="'Poet': the name is already a served name"):
        check_definition(_with_adapters({"name": "poet", "file": "/models/a.gguf"},
                                        {"name": "Poet", "file": "/models/b.gguf"}))
    check_definition(_with_adapters({"name": "poet", "file": "/models/a.gguf"},
                                    {"name": "pirate", "file": "/models/a.gguf", "scale": 0.5}))


async def test_adapter_names_share_one_namespace_with_served_names(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "models.json")
    await registry.add(_with_adapters({"name": "poet", "file": "/models/poet.gguf"}))
    with pytest.raises(RegistryError) as taken:
        await registry.add(model("poet", "/models/other.gguf"))  # a served name an adapter has
    assert (taken.value.status, taken.value.code) == (409, "served_name_taken")
    assert "served name 'poet' is already used by model 'base'" in taken.value.message
    with pytest.raises(RegistryError, match="served name 'Base' is already used by model 'base'"):
        await registry.add(model("other", "/models/o.gguf", adapters=[{"name": "Base", "file": "/models/x.gguf"}]))
    with pytest.raises(RegistryError, match="served name 'POET' is already used by model 'base'"):
        await registry.add(model("other", "/models/o.gguf", adapters=[{"name": "POET", "file": "/models/x.gguf"}]))
    # The model itself may keep its adapters through an update.
    await registry.update(_with_adapters({"name": "poet", "file": "/models/poet.gguf", "scale": 0.25}))
    found = registry.by_adapter_name("Poet")
    assert found is not None and found[0].id == "base" and found[1] == 0


async def _body_lines(lines: object, count: int) -> list[dict[str, object]]:
    """The next ``count`` chat request bodies the fake runtime logged (not the agent's own probe)."""
    bodies: list[dict[str, object]] = []
    async for line in lines:  # type: ignore[attr-defined]
        if line.startswith("fake: body ") and "messages" in (body := json.loads(line[len("fake: body "):])):
            bodies.append(body)
            if len(bodies) == count:
                return bodies
    raise AssertionError("the log stream ended before the runtime logged the requests")


async def test_a_request_for_an_adapter_reaches_its_base_with_only_that_adapter_applied(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    base = write_gguf(folder / "base.gguf", arch="llama")
    pirate = write_gguf(folder / "pirate.gguf", arch="llama", extra=LORA)
    poet = write_gguf(folder / "poet.gguf", arch="llama", extra=LORA)
    runtime = write_fake_runtime(tmp_path / "bin", tokens=2, log_bodies=True)
    adapters = [{"name": "base-pirate", "file": str(pirate)}, {"name": "base-poet", "file": str(poet), "scale": 0.5}]
    async with running_daemon(tmp_path / "home", runtime) as d, aiohttp.ClientSession() as http:
        await d.client.create_model(model("base", str(base), adapters=adapters))
        assert (await d.client.start_model("base", wait=True)).state == ModelState.READY
        instance = (await d.client.get_model("base")).status
        assert instance.state == ModelState.READY

        async with http.get(f"{d.v1}/models") as resp:
            listed = {m["id"]: m for m in (await resp.json())["data"]}
        assert set(listed) == {"base", "base-pirate", "base-poet"}
        assert (listed["base"]["owned_by"], listed["base-poet"]["owned_by"]) == ("mirbadllm", "base")
        async with http.get(f"{d.v1}/models/base-poet") as resp:
            assert resp.status == 200 and (await resp.json())["owned_by"] == "base"

        lines = d.client.logs("base", tail=1, follow=True)
        await asyncio.wait_for(anext(lines), 20)  # the stream is open
        for name in ("base-poet", "base"):
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                    "lora": [{"id": 0, "scale": 1.0}]}  # a client's own lora is replaced
            async with http.post(f"{d.v1}/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
        to_poet, to_base = await asyncio.wait_for(_body_lines(lines, 2), 20)
        await lines.aclose()
        assert to_poet["model"] == "base" and to_poet["lora"] == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.5}]
        assert to_base["model"] == "base" and to_base["lora"] == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]
        assert to_poet["messages"] == body["messages"] and to_poet["max_tokens"] == 2


async def test_a_file_that_is_no_lora_for_the_model_fails_the_start_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    base = write_gguf(folder / "base.gguf", arch="llama")
    wrong = write_gguf(folder / "qwen-lora.gguf", arch="llama", extra=LORA)  # a LoRA for it when saved
    runtime = write_fake_runtime(tmp_path / "bin", tokens=2)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("base", str(base), adapters=[{"name": "q", "file": str(wrong)}]))
        write_gguf(wrong, arch="qwen2", extra=LORA)  # replaced on the node after the save
        with pytest.raises(DaemonError) as refused:
            await d.client.start_model("base", wait=True)
        assert "is an adapter for architecture 'qwen2', not for the model's 'llama'" in str(refused.value)
