"""The first-run offer's view-model, Qt-free, over the real daemon and its local agent on a machine of
its own (a temporary Ollama store and LM Studio folder; the demo model from the fake hub): an empty
fleet is offered the demo model and the models already on the machine; the offer goes away once
there is a model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from helpers import definition, until
from real_daemon import RealDaemon, daemon_on_a_machine, hub_in_thread, models_only

from app.viewmodels.first_run import FirstRunViewModel
from app.viewmodels.fleet import FleetViewModel
from daemon.api.client import DaemonClient
from daemon.api.demo_model import DEMO_HF_FILE, DEMO_HF_REPO
from daemon.api.models import ModelDefinition, ModelState
from tests.agent.test_imports import ollama_store
from tests.fakes.fake_hf_hub import FakeHub, HubFile
from tests.fakes.gguf_files import gguf_bytes, write_gguf

QWEN = "lmstudio-community/Qwen3-4B-GGUF"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, FakeHub, Path]]:
    """The daemon, the hub holding the demo model's file, and LM Studio's models folder (Qwen3 4B with
    its projector); Ollama's store holds llama3.2:3b."""
    root = tmp_path_factory.mktemp("first-run")
    lms = root / "user" / ".lmstudio" / "models"
    write_gguf(lms / QWEN / "Qwen3-4B-Q4_K_M.gguf")
    write_gguf(lms / QWEN / "mmproj-Qwen3-4B-F16.gguf", arch="clip", layers=1)
    ollama_store(root / "ollama", name="llama3.2", tag="3b", projector=False)
    with hub_in_thread(root) as hub:
        hub.add(DEMO_HF_REPO, DEMO_HF_FILE, gguf_bytes() + bytes(4_000_000))
        with daemon_on_a_machine(root) as found:
            yield found, hub, lms


def demo_file(hub: FakeHub) -> HubFile:
    return hub.repos[DEMO_HF_REPO][DEMO_HF_FILE]


async def _setup(client: DaemonClient) -> tuple[FleetViewModel, FirstRunViewModel]:
    fleet = FleetViewModel(client, host_refresh_s=3600, poll_timeout=1)
    vm = FirstRunViewModel(client, fleet)
    fleet.start()
    await until(lambda: fleet.snapshot.value.loaded, timeout=30)
    return fleet, vm


@pytest.fixture
async def empty(machine: tuple[RealDaemon, FakeHub, Path]) -> AsyncIterator[tuple[FleetViewModel, FirstRunViewModel]]:
    daemon, hub, _lms = machine
    models_only(daemon)
    demo_file(hub).chunk_delay = 0.0
    client = DaemonClient(*daemon, client_name="app")
    fleet, vm = await _setup(client)
    yield fleet, vm
    vm.close()
    await fleet.stop()
    await client.close()


def _models(daemon: RealDaemon) -> dict[str, ModelDefinition]:
    return {d.id: d for d in daemon.call(lambda deps: deps.registry.all())}


async def test_an_empty_fleet_is_offered_the_demo_and_the_models_found_on_the_machine(
        empty: tuple[FleetViewModel, FirstRunViewModel]) -> None:
    _fleet, vm = empty
    assert vm.state.value.offered
    await until(lambda: vm.state.value.scanned, timeout=30)  # the scan starts by itself once the offer shows
    found = vm.state.value.found
    assert [(m.source_text, m.name) for m in found] == [
        ("Ollama", "llama3.2:3b"), ("LM Studio", f"{QWEN}/Qwen3-4B-Q4_K_M.gguf")]


async def test_get_the_demo_model_downloads_it_registers_it_with_the_demo_settings_and_starts_it(
        empty: tuple[FleetViewModel, FirstRunViewModel], machine: tuple[RealDaemon, FakeHub, Path]) -> None:
    fleet, vm = empty
    daemon, hub, _lms = machine
    demo_file(hub).chunk_delay = 0.05  # slow enough to be seen on its way
    await vm.get_demo()
    assert vm.state.value.downloading and not vm.state.value.can_get_demo
    await until(lambda: 0 < (vm.state.value.progress or 0) < 1, timeout=30)
    assert f"/{DEMO_HF_REPO}/resolve/main/{DEMO_HF_FILE}" in [s.path for s in hub.requests("hub")]
    t = vm.state.value.demo_transfer
    assert t is not None and t.bytes_total == len(demo_file(hub).data)
    assert vm.state.value.progress_text == f"Running — {t.bytes_done / 1e6:.0f} of {t.bytes_total / 1e6:.0f} MB"
    demo_file(hub).chunk_delay = 0.0
    await until(lambda: any(m.definition.id == "gemma-3-270m" and m.status.state == ModelState.READY
                            for m in fleet.snapshot.value.models), timeout=30)
    demo = _models(daemon)["gemma-3-270m"]
    assert demo.settings.chat_template == "gemma" and demo.settings.ctx_size == 8192 and "demo" in demo.tags
    assert demo.sources is not None and (demo.sources.hf_repo, demo.sources.hf_file) == (DEMO_HF_REPO, DEMO_HF_FILE)
    assert not vm.state.value.offered  # the card goes away once there is a model


async def test_add_imports_an_ollama_model_and_registers_an_lm_studio_file_where_it_is(
        empty: tuple[FleetViewModel, FirstRunViewModel], machine: tuple[RealDaemon, FakeHub, Path]) -> None:
    fleet, vm = empty
    daemon, _hub, lms = machine
    await until(lambda: vm.state.value.scanned, timeout=30)
    ollama, lmstudio = vm.state.value.found
    await vm.add_found(ollama.key)
    assert ollama.key in vm.state.value.adding
    await vm.add_found(lmstudio.key)
    created = _models(daemon)["qwen3-4b-q4-k-m"]
    assert created.model_path == str(lms / QWEN / "Qwen3-4B-Q4_K_M.gguf")
    assert created.extra_args == ["--mmproj", str(lms / QWEN / "mmproj-Qwen3-4B-F16.gguf")]
    await until(lambda: not vm.state.value.offered, timeout=30)
    # the Ollama import is the daemon's: its model joins once the blobs are checked
    await until(lambda: len(fleet.snapshot.value.models) == 2, timeout=30)
    assert sorted(m.definition.id for m in fleet.snapshot.value.models) == ["llama3-2-3b", "qwen3-4b-q4-k-m"]


async def test_a_fleet_with_a_model_is_not_offered_anything(machine: tuple[RealDaemon, FakeHub, Path]) -> None:
    daemon, _hub, _lms = machine
    models_only(daemon, definition("alpha", node="local"))
    client = DaemonClient(*daemon, client_name="app")
    fleet, vm = await _setup(client)
    try:
        assert fleet.snapshot.value.models and not vm.state.value.offered
        assert not vm.state.value.scanned and not vm.state.value.scanning  # nothing looked for
    finally:
        vm.close()
        await fleet.stop()
        await client.close()
