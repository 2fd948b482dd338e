"""The add-model wizard's view-model, Qt-free, over the real daemon: its node "tower" (a real agent
with one GPU, the fake llama-server), the fake Hugging Face hub, an Ollama store on that machine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from helpers import until
from real_daemon import RealDaemon, fake_hub_for, gpu_node

from agent.api.models import GpuInfo
from agent.api.sources import FitReport, GgufSummary, MemoryEstimate, TransferState
from app.viewmodels.add_model import AddModelState, AddModelViewModel, describe_fit, gib
from app.viewmodels.fleet import FleetViewModel
from daemon.api.client import DaemonClient
from daemon.api.sources import Transfer
from tests.agent.test_imports import ollama_store
from tests.fakes.gguf_files import gguf_bytes, write_gguf

GiB = 1 << 30
REPO = "acme/tiny-GGUF"
RTX = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", memory_total=24 * GiB, memory_used=GiB)
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}  # GiBs of KV cache


class Fleet:
    def __init__(self, daemon: RealDaemon, node: str, root: Path, store: Path) -> None:
        self.daemon, self.node, self.root, self.store = daemon, node, root, store


@pytest.fixture(scope="module")
def fleet(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The daemon's one node "tower", the hub holding acme/tiny-GGUF (a small file, another quant and
    a slow one) and an Ollama store holding llama3.2:3b and qwen3:4b."""
    root = tmp_path_factory.mktemp("wizard")
    with fake_hub_for(real_daemon, root) as hub:
        hub.add(REPO, "tiny-Q4_K_M.gguf", gguf_bytes(**BIG) + bytes(1 << 20))
        hub.add(REPO, "tiny-Q8_0.gguf", gguf_bytes(**BIG))
        hub.add("acme/slow-GGUF", "slow-Q4_K_M.gguf", gguf_bytes() + bytes(4 << 20), chunk_delay=0.02)
        store = ollama_store(root / "ollama", name="llama3.2", tag="3b")
        ollama_store(store, name="qwen3", tag="4b")
        yield Fleet(real_daemon, gpu_node(real_daemon, root, "tower", [RTX]), root, store)


@pytest.fixture
async def vm(fleet: Fleet) -> AsyncIterator[AddModelViewModel]:
    """The wizard over the app's client, with the fleet's events (transfer progress); on "tower"."""
    client = DaemonClient(*fleet.daemon, client_name="app")
    feed = FleetViewModel(client, host_refresh_s=3600, poll_timeout=1)
    feed.start()
    await until(lambda: feed.snapshot.value.loaded, timeout=10)
    wizard = AddModelViewModel(client, feed.events)
    await wizard.load_nodes()
    assert wizard.state.value.node == "tower"
    try:
        yield wizard
    finally:
        wizard.close()
        await feed.stop()
        await client.close()


def report(fits: bool = True, ctx: int = 4096) -> FitReport:
    summary = GgufSummary(architecture="llama", file_size=2 * GiB, tensor_bytes=2 * GiB, tensor_count=200,
                          block_count=28, context_length=131072)
    estimate = MemoryEstimate(ctx_size=ctx, parallel=4, weights_bytes=2 * GiB, kv_cache_bytes=GiB // 2,
                              compute_bytes=GiB // 8, overhead_bytes=GiB // 32, host_bytes=3 * GiB,
                              total_bytes=3 * GiB)
    return FitReport(summary=summary, estimate=estimate, memory_total=32 * GiB, memory_available=20 * GiB,
                     reserve_bytes=GiB, fits=fits, max_ctx_size=65536)


async def test_will_it_fit_for_a_hugging_face_quant(vm: AddModelViewModel) -> None:
    assert not vm.state.value.can_check
    vm.set_field("hf_repo", REPO)
    vm.set_field("hf_file", "Q4_K_M")
    vm.set_field("ctx_size", "8192")
    fit = await vm.check_fit()
    assert fit is not None and vm.state.value.error is None, vm.state.value.error
    assert vm.state.value.fit_text.startswith("Fits: needs ") and "with 8192 tokens of context" in \
        vm.state.value.fit_text
    assert (fit.source, fit.estimate.ctx_size) == (f"hf:{REPO}/tiny-Q4_K_M.gguf", 8192), "the quant and context asked"
    vm.set_field("hf_file", "*Q8_0*.gguf")
    assert vm.state.value.fit is None  # a changed question clears the old answer
    again = await vm.check_fit()
    assert again is not None and again.source == f"hf:{REPO}/tiny-Q8_0.gguf"


def test_the_fit_sentence_says_what_to_do() -> None:
    text = describe_fit(report(fits=False))
    assert text.startswith("Does not fit") and "Largest context that fits: 65536 tokens" in text
    assert "trained on" not in text
    # 4 slots of 262144 tokens each, twice the 131072 the model was trained on: it fits, with a warning.
    beyond = describe_fit(report(ctx=4 * 262144))
    assert beyond.startswith("Fits") and "the model was trained on 131072 tokens of context" in beyond


async def test_a_download_shows_progress_until_the_model_is_registered(vm: AddModelViewModel, fleet: Fleet) -> None:
    vm.set_field("hf_repo", "acme/slow-GGUF")
    vm.set_field("hf_file", "slow-Q4_K_M.gguf")
    vm.set_field("model_id", "slow")
    await vm.add()
    state = vm.state.value
    assert state.transfer is not None and state.running and not state.can_add
    await until(lambda: 0 < (vm.state.value.progress or 0) < 1, timeout=30, what="the download under way")
    t = vm.state.value.transfer
    assert t is not None and vm.state.value.progress == t.bytes_done / t.bytes_total  # type: ignore[operator]
    assert f"{t.bytes_done / GiB:.2f} of {gib(t.bytes_total or 0)}" in vm.state.value.progress_text
    await until(lambda: vm.state.value.done_ids == ("slow",), timeout=60, what="the model registered")
    assert not vm.state.value.running and "added slow" in vm.state.value.progress_text
    saved = (await vm.client.get_model("slow")).definition
    assert saved.node == fleet.node and Path(saved.model_path).name == "slow-Q4_K_M.gguf"


def test_a_reimport_says_which_model_already_has_the_file() -> None:
    done = Transfer(id="x3", kind="ollama", label="tiny:1b", state=TransferState.DONE, existing=["tiny-1b"])
    assert AddModelState(transfer=done).progress_text == "Done — already added as tiny-1b (not added again)"


async def test_a_file_on_the_node_is_registered_directly(vm: AddModelViewModel, fleet: Fleet) -> None:
    path = write_gguf(fleet.root / "models" / "Llama-3.2-3B.Q4_K_M.gguf")
    vm.set_source("file")
    vm.set_field("path", str(path))
    await vm.add()
    assert vm.state.value.error is None and vm.state.value.done_ids == ("llama-3-2-3b-q4-k-m",)
    created = (await vm.client.get_model("llama-3-2-3b-q4-k-m")).definition
    assert (created.model_path, created.node) == (str(path), fleet.node)


async def test_an_ollama_import_registers_the_model(vm: AddModelViewModel, fleet: Fleet) -> None:
    vm.set_source("ollama")
    vm.set_field("ollama_store", str(fleet.store))
    await vm.load_ollama_models()
    assert vm.state.value.error is None, vm.state.value.error
    assert vm.state.value.ollama_model == "llama3.2:3b" and len(vm.state.value.ollama_models) == 2
    await vm.add()
    assert vm.state.value.transfer is not None and vm.state.value.transfer.kind == "ollama"
    await until(lambda: bool(vm.state.value.done_ids), timeout=30, what="the import registered")
    model_id, = vm.state.value.done_ids
    assert model_id.startswith("llama3-2"), "the model picked in the list is the one imported"
    assert (await vm.client.get_model(model_id)).definition.node == fleet.node


async def test_a_download_can_be_cancelled(vm: AddModelViewModel) -> None:
    vm.set_field("hf_repo", "acme/slow-GGUF")
    vm.set_field("hf_file", "slow-Q4_K_M.gguf")
    vm.set_field("model_id", "never")
    await vm.add()
    await until(lambda: vm.state.value.running and (vm.state.value.progress or 0) > 0, timeout=30)
    await vm.cancel()
    await until(lambda: vm.state.value.transfer is not None and vm.state.value.transfer.state == TransferState.CANCELLED,
                timeout=10)
    assert vm.state.value.can_add and not vm.state.value.done_ids
    assert "never" not in {m.definition.id for m in await vm.client.list_models()}


async def test_a_refusal_is_shown_not_raised(vm: AddModelViewModel) -> None:
    vm.set_field("hf_repo", REPO)
    vm.set_field("hf_file", "../../etc/passwd.gguf")
    await vm.add()
    assert vm.state.value.error == "file may not be '..'" and vm.state.value.can_add
    assert vm.state.value.transfer is None
