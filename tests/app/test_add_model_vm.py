"""The add-model wizard's view-model, Qt-free, over the fake daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_sources import FakeSourcesClient, report
from helpers import add_model_vm, until

from agent.api.sources import TransferState
from app.viewmodels.add_model import AddModelState, AddModelViewModel, describe_fit
from daemon.api.client import DaemonError
from daemon.api.sources import Transfer


@pytest.fixture
async def setup() -> AsyncIterator[tuple[FakeSourcesClient, AddModelViewModel]]:
    fake = FakeSourcesClient()
    async with add_model_vm(fake) as vm:
        yield fake, vm


async def test_will_it_fit_for_a_hugging_face_quant(setup: tuple[FakeSourcesClient, AddModelViewModel]) -> None:
    fake, vm = setup
    assert not vm.state.value.can_check
    vm.set_field("hf_repo", "acme/tiny-GGUF")
    vm.set_field("hf_file", "Q4_K_M")
    vm.set_field("ctx_size", "8192")
    report = await vm.check_fit()
    assert report is not None and vm.state.value.fit_text.startswith("Fits: needs 3.00 GiB")
    query = fake.called("fit")[0][0]
    assert (query.hf.repo, query.hf.quant, query.hf.file, query.settings.ctx_size) == ("acme/tiny-GGUF", "Q4_K_M",
                                                                                       None, 8192)
    vm.set_field("hf_file", "*Q8_0*.gguf")
    assert vm.state.value.fit is None  # a changed question clears the old answer
    await vm.check_fit()
    assert fake.called("fit")[1][0].hf.file == "*Q8_0*.gguf"


def test_the_fit_sentence_says_what_to_do() -> None:
    text = describe_fit(report(fits=False))
    assert text.startswith("Does not fit") and "Largest context that fits: 65536 tokens" in text
    assert "trained on" not in text
    # 4 slots of 262144 tokens each, twice the 131072 the model was trained on: it fits, with a warning.
    beyond = describe_fit(report(ctx=4 * 262144))
    assert beyond.startswith("Fits") and "the model was trained on 131072 tokens of context" in beyond


async def test_a_download_shows_progress_until_the_model_is_registered(
        setup: tuple[FakeSourcesClient, AddModelViewModel]) -> None:
    fake, vm = setup
    vm.set_field("hf_repo", "acme/tiny-GGUF")
    vm.set_field("hf_file", "tiny-Q4_K_M.gguf")
    vm.set_field("model_id", "tiny")
    await vm.add()
    state = vm.state.value
    assert state.transfer is not None and state.running and not state.can_add
    fake.advance(state.transfer.id, state=TransferState.RUNNING, stage="downloading", bytes_total=4 << 30)
    fake.advance(state.transfer.id, bytes_done=1 << 30)
    await until(lambda: vm.state.value.progress == 0.25)
    assert "1.00 of 4.00 GiB" in vm.state.value.progress_text
    fake.advance(state.transfer.id, state=TransferState.DONE, stage="done", bytes_done=4 << 30)
    await until(lambda: vm.state.value.done_ids == ("tiny",))
    assert not vm.state.value.running and "added tiny" in vm.state.value.progress_text


def test_a_reimport_says_which_model_already_has_the_file() -> None:
    done = Transfer(id="x3", kind="ollama", label="tiny:1b", state=TransferState.DONE, existing=["tiny-1b"])
    assert AddModelState(transfer=done).progress_text == "Done — already added as tiny-1b (not added again)"


async def test_a_file_on_the_node_is_registered_directly(setup: tuple[FakeSourcesClient, AddModelViewModel]) -> None:
    fake, vm = setup
    vm.set_source("file")
    vm.set_field("path", "/models/Llama-3.2-3B.Q4_K_M.gguf")
    await vm.add()
    created = fake.called("create_model")[0][0]
    assert (created.id, created.model_path) == ("llama-3-2-3b-q4-k-m", "/models/Llama-3.2-3B.Q4_K_M.gguf")
    assert vm.state.value.done_ids == ("llama-3-2-3b-q4-k-m",)


async def test_an_ollama_import_and_its_cancel(setup: tuple[FakeSourcesClient, AddModelViewModel]) -> None:
    fake, vm = setup
    vm.set_source("ollama")
    await vm.load_ollama_models()
    assert vm.state.value.ollama_model == "llama3.2:3b" and len(vm.state.value.ollama_models) == 2
    await vm.add()
    assert fake.called("import_ollama")[0][0].model == "llama3.2:3b"
    await vm.cancel()
    await until(lambda: vm.state.value.transfer is not None and vm.state.value.transfer.state == TransferState.CANCELLED)
    assert vm.state.value.can_add


async def test_a_refusal_is_shown_not_raised(setup: tuple[FakeSourcesClient, AddModelViewModel]) -> None:
    fake, vm = setup
    vm.set_field("hf_repo", "acme/tiny-GGUF")
    vm.set_field("hf_file", "../../etc/passwd.gguf")
    fake.fail_next["download"] = DaemonError(422, "invalid_source", "file '../../etc/passwd.gguf' may not be '..'")
    await vm.add()
    assert vm.state.value.error == "file '../../etc/passwd.gguf' may not be '..'" and vm.state.value.can_add
