"""The add-model wizard for vLLM and MLX: a model folder as well as a file, vLLM's container image
(the node's by default), and the definition saved with the runtime's own settings; llama.cpp's
wizard is what it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from helpers import add_model_dialog

from app.context import AppContext
from app.ui.add_model_dialog import AddModelDialog
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from daemon.api.nodes import NodeState, NodeView, RuntimeOffer

GPU, MAC = "a" * 64, "c" * 64
NODE_IMAGE = "vllm/vllm-openai:v0.9.1"


def gpu_box() -> NodeView:
    return NodeView(id=GPU, name="gpu-box", state=NodeState.ONLINE, address="10.0.0.9:9443", runtimes=[
        RuntimeOffer(runtime="llamacpp", available=True, version="b4242", location="/opt/llama-server"),
        RuntimeOffer(runtime="vllm", available=True, version="0.9.1", location=NODE_IMAGE),
        RuntimeOffer(runtime="mlx", available=False, reason="MLX runs on Apple Silicon only")])


def mac() -> NodeView:
    return NodeView(id=MAC, name="studio", state=NodeState.ONLINE, address="10.0.0.7:9443", runtimes=[
        RuntimeOffer(runtime="llamacpp", available=True, version="b4242", location="/opt/llama-server"),
        RuntimeOffer(runtime="vllm", available=False, reason="no Docker engine"),
        RuntimeOffer(runtime="mlx", available=True, version="0.26.0", location="/opt/mlx/bin/mlx_lm.server")])


async def wizard(fake: FakeDaemonClient, node: str, runtime: str) -> AddModelViewModel:
    fake.nodes.extend([gpu_box(), mac()])
    vm = AddModelViewModel(fake)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("node", node)
    vm.set_runtime(runtime)
    return vm


async def test_a_vllm_folder_is_saved_with_the_nodes_image_and_max_model_len(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake, "gpu-box", "vllm")
    s = vm.state.value
    assert s.takes_folder and s.asks_image and s.asks_context
    assert s.image_default == NODE_IMAGE and s.chosen_image == NODE_IMAGE
    vm.set_field("path", "/models/Qwen2.5-7B-Instruct-AWQ/")
    assert not vm.state.value.can_check  # the fit estimate reads a GGUF header; a folder has none
    assert vm.state.value.can_add
    vm.set_field("ctx_size", "16384")
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    saved = fake.called("create_model")[-1][0]
    assert (saved.id, saved.runtime, saved.node, saved.model_path) == (
        "qwen2-5-7b-instruct-awq", "vllm", GPU, "/models/Qwen2.5-7B-Instruct-AWQ/")  # the node typed, by its id
    assert saved.image == NODE_IMAGE and saved.vllm.max_model_len == 16384
    assert saved.settings.ctx_size is None  # llama.cpp's settings are not where vLLM's context goes
    vm.close()


async def test_a_typed_image_wins_and_no_image_at_all_blocks_adding(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake, "gpu-box", "vllm")
    vm.set_field("path", "/models/qwen")
    vm.set_field("image", "  mirror.local/vllm-openai:v0.10.0  ")
    assert vm.state.value.chosen_image == "mirror.local/vllm-openai:v0.10.0"
    await vm.add()
    assert fake.called("create_model")[-1][0].image == "mirror.local/vllm-openai:v0.10.0"

    fake.nodes[-2] = gpu_box().model_copy(update={"runtimes": [
        gpu_box().runtimes[0], gpu_box().runtimes[1].model_copy(update={"location": None})]})
    await vm.load_nodes()
    vm.set_field("image", "")
    assert vm.state.value.image_default == "" and vm.state.value.chosen_image is None
    assert not vm.state.value.can_add  # vLLM cannot run a model without an image
    vm.close()


async def test_an_mlx_folder_is_saved_without_a_context_or_an_image(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake, MAC[:8], "mlx")
    s = vm.state.value
    assert s.takes_folder and not s.asks_image and not s.asks_context
    vm.set_field("path", "/Users/me/models/Qwen3-4B-4bit")
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert (saved.id, saved.runtime, saved.node, saved.image) == ("qwen3-4b-4bit", "mlx", MAC, None)
    assert saved.mlx.max_tokens is None
    vm.close()


async def test_llama_cpp_keeps_its_gguf_file_context_and_fit(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake, "gpu-box", "llamacpp")
    s = vm.state.value
    assert not s.takes_folder and not s.asks_image and s.chosen_image is None
    vm.set_field("path", "/models/qwen-7b.Q4_K_M.gguf")
    vm.set_field("image", "ignored/for-llama:1")
    vm.set_field("ctx_size", "8192")
    assert vm.state.value.can_check
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert (saved.id, saved.runtime, saved.image, saved.settings.ctx_size) == (
        "qwen-7b-q4-k-m", "llamacpp", None, 8192)
    assert saved.vllm.max_model_len is None
    vm.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(fake: FakeDaemonClient, open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext]:
    fake.nodes.extend([gpu_box(), mac()])
    win = open_main_window(fake, nodes_loaded=True)
    return win, win.ctx


def choose(dialog: AddModelDialog, runtime: str) -> None:
    index = dialog.runtime.findData(runtime)
    dialog.runtime.setCurrentIndex(index)
    dialog.runtime.activated.emit(index)


@pytest.mark.gui
def test_the_wizard_asks_vllm_for_its_image_and_mlx_for_no_context(
        window: tuple[MainWindow, AppContext], fake: FakeDaemonClient, qtbot: Any) -> None:
    win, ctx = window
    with add_model_dialog(ctx, win) as dialog:
        qtbot.waitUntil(lambda: len(dialog.vm.state.value.nodes) == 3)
        dialog.source_buttons.button(1).click()  # a file on the node
        qtbot.keyClicks(dialog.node, "gpu-box")
        qtbot.waitUntil(lambda: dialog.runtime.findData("vllm") >= 0)
        assert not dialog.image.isVisible() and dialog.ctx_size.isVisible()
        assert dialog.path.placeholderText() == "/path/to/model.gguf (on the node)"

        choose(dialog, "vllm")
        assert dialog.image.isVisible() and dialog.image.placeholderText() == NODE_IMAGE
        assert "folder" in dialog.path.placeholderText() and "max model length" in dialog.ctx_size.placeholderText()
        qtbot.keyClicks(dialog.path, "/models/Qwen2.5-7B-Instruct-AWQ")
        qtbot.keyClicks(dialog.image, "mirror.local/vllm:v1")
        qtbot.keyClicks(dialog.ctx_size, "4096")
        assert not dialog.fit_button.isEnabled() and dialog.add_button.isEnabled()
        dialog.add_button.click()
        qtbot.waitUntil(lambda: bool(fake.called("create_model")))
        saved = fake.called("create_model")[-1][0]
        assert (saved.runtime, saved.image, saved.vllm.max_model_len) == ("vllm", "mirror.local/vllm:v1", 4096)

        dialog.node.clear()
        qtbot.keyClicks(dialog.node, "studio")
        qtbot.waitUntil(lambda: dialog.runtime.findData("mlx") >= 0)
        choose(dialog, "mlx")
        assert not dialog.image.isVisible() and not dialog.ctx_size.isVisible()


@pytest.mark.gui
@pytest.mark.parametrize("size", [(1280, 800), (1024, 700)])
def test_a_refusal_is_said_in_plain_words_and_the_fields_keep_their_size(
        window: tuple[MainWindow, AppContext], fake: FakeDaemonClient, qtbot: Any, size: tuple[int, int]) -> None:
    from PySide6.QtWidgets import QApplication

    win, ctx = window
    win.resize(*size)
    with add_model_dialog(ctx, win) as dialog:
        qtbot.waitUntil(lambda: bool(dialog.vm.state.value.nodes))
        dialog.source_buttons.button(1).click()  # a file on the node
        qtbot.keyClicks(dialog.path, "/models/notes.gguf")
        qtbot.keyClicks(dialog.model_id, "Not A Valid Id!")
        dialog.layout().activate()  # laid out as the user sees it before the click
        QApplication.processEvents()
        heights = {w.objectName(): w.height() for w in (dialog.node, dialog.model_id, dialog.path)}
        buttons_at = dialog.add_button.mapTo(dialog, dialog.add_button.rect().topLeft())
        dialog.add_button.click()
        qtbot.waitUntil(dialog.error.isVisible)
        text = dialog.error.text()
        assert text.startswith("Model id: ") and "lowercase letters" in text
        assert "pydantic" not in text and "type=" not in text
        dialog.layout().activate()  # lay it out now with the error shown, then read the sizes
        QApplication.processEvents()
        for w in (dialog.node, dialog.model_id, dialog.path):
            assert w.height() >= heights[w.objectName()] >= w.minimumSizeHint().height(), w.objectName()
        assert dialog.add_button.mapTo(dialog, dialog.add_button.rect().topLeft()) == buttons_at, \
            "the buttons stay where the pointer is"
