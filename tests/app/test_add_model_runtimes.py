"""The add-model wizard for vLLM and MLX over the real daemon: a model folder as well as a file, vLLM's
container image (the node's by default), and the definition saved with the runtime's own settings;
llama.cpp's wizard is what it was. Its nodes are real agents: "gpu-box" reaches a Docker engine
(``tests/fakes/fake_docker_engine.py``, holding its vLLM 0.9.1 image) and runs no MLX (not a Mac);
"studio" believes it is Apple silicon (its platform seam) with the fake mlx_lm.server, and has no
Docker engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import add_model_dialog
from real_daemon import RealDaemon, gpu_node

from agent.runtimes.mlx import MlxPlatform
from app.ui.add_model_dialog import AddModelDialog
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelState, AddModelViewModel
from daemon.api.client import DaemonClient
from daemon.api.nodes import NodeView
from tests.agent.test_mlx_driver import write_fake_mlx
from tests.fakes.fake_docker_engine import FakeDockerEngine
from tests.fakes.gguf_files import write_gguf

NODE_IMAGE = "vllm/vllm-openai:v0.9.1"


class Nodes:
    def __init__(self, daemon: RealDaemon, gpu: str, mac: str, gguf: Path) -> None:
        self.daemon, self.gpu, self.mac, self.gguf = daemon, gpu, mac, gguf


@pytest.fixture(scope="module")
def nodes(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("runtimes")
    engine = real_daemon.call(lambda _deps: FakeDockerEngine(root / "docker.sock", NODE_IMAGE,
                                                             {"ai.vllm.version": "0.9.1"}).start())
    try:
        gpu = gpu_node(real_daemon, root, "gpu-box", [], vllm_image=NODE_IMAGE, docker_socket=str(root / "docker.sock"))
        mac = gpu_node(real_daemon, root, "studio", [], mlx_platform=MlxPlatform("darwin", "arm64"),
                       mlx_server=write_fake_mlx(root / "mlx"), docker_socket=str(root / "no-docker.sock"))
        yield Nodes(real_daemon, gpu, mac, write_gguf(root / "models" / "qwen-7b.Q4_K_M.gguf"))
    finally:
        real_daemon.call(lambda _deps: engine.close())


async def wizard(client: DaemonClient, node: str, runtime: str) -> AddModelViewModel:
    vm = AddModelViewModel(client)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("node", node)
    vm.set_runtime(runtime)
    return vm


async def saved(client: DaemonClient, model_id: str) -> Any:
    return (await client.get_model(model_id)).definition


async def test_a_vllm_folder_is_saved_with_the_nodes_image_and_max_model_len(nodes: Nodes,
                                                                            client: DaemonClient) -> None:
    vm = await wizard(client, "gpu-box", "vllm")
    s = vm.state.value
    assert s.takes_folder and s.asks_image and s.asks_context
    assert s.image_default == NODE_IMAGE and s.chosen_image == NODE_IMAGE
    vm.set_field("path", "/models/Qwen2.5-7B-Instruct-AWQ/")
    assert not vm.state.value.can_check  # the fit estimate reads a GGUF header; a folder has none
    assert vm.state.value.can_add
    vm.set_field("ctx_size", "16384")
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    model = await saved(client, "qwen2-5-7b-instruct-awq")
    assert (model.runtime, model.node, model.model_path) == ("vllm", nodes.gpu, "/models/Qwen2.5-7B-Instruct-AWQ/")
    assert model.image == NODE_IMAGE and model.vllm.max_model_len == 16384
    assert model.settings.ctx_size is None  # llama.cpp's settings are not where vLLM's context goes
    vm.close()


async def test_a_typed_image_wins_and_no_image_at_all_blocks_adding(nodes: Nodes, client: DaemonClient) -> None:
    vm = await wizard(client, "gpu-box", "vllm")
    vm.set_field("path", "/models/qwen")
    vm.set_field("image", "  mirror.local/vllm-openai:v0.10.0  ")
    assert vm.state.value.chosen_image == "mirror.local/vllm-openai:v0.10.0"
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    assert (await saved(client, "qwen")).image == "mirror.local/vllm-openai:v0.10.0"
    vm.close()

    # A node whose vLLM offer names no image (no agent here reports one so: a hand-made snapshot).
    box: NodeView = next(n for n in vm.state.value.nodes if n.id == nodes.gpu)
    bare = box.model_copy(update={"runtimes": [o.model_copy(update={"location": None}) if o.runtime == "vllm" else o
                                               for o in box.runtimes]})
    s = AddModelState(source="file", node="gpu-box", nodes=(bare,), runtime="vllm", path="/models/qwen")
    assert s.image_default == "" and s.chosen_image is None
    assert not s.can_add  # vLLM cannot run a model without an image


async def test_an_mlx_folder_is_saved_without_a_context_or_an_image(nodes: Nodes, client: DaemonClient) -> None:
    vm = await wizard(client, nodes.mac[:8], "mlx")  # a node named by a prefix of its id
    s = vm.state.value
    assert s.takes_folder and not s.asks_image and not s.asks_context
    assert "mlx" not in dict(AddModelState(node="gpu-box", nodes=s.nodes, source="file").runtime_choices), \
        "gpu-box is no Mac"
    vm.set_field("path", "/Users/me/models/Qwen3-4B-4bit")
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    model = await saved(client, "qwen3-4b-4bit")
    assert (model.runtime, model.node, model.image) == ("mlx", nodes.mac, None)
    assert model.mlx.max_tokens is None
    vm.close()


async def test_llama_cpp_keeps_its_gguf_file_context_and_fit(nodes: Nodes, client: DaemonClient) -> None:
    vm = await wizard(client, "gpu-box", "llamacpp")
    s = vm.state.value
    assert not s.takes_folder and not s.asks_image and s.chosen_image is None
    vm.set_field("path", str(nodes.gguf))
    vm.set_field("image", "ignored/for-llama:1")
    vm.set_field("ctx_size", "8192")
    assert vm.state.value.can_check
    assert await vm.check_fit() is not None, vm.state.value.error
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    model = await saved(client, "qwen-7b-q4-k-m")
    assert (model.runtime, model.image, model.settings.ctx_size) == ("llamacpp", None, 8192)
    assert model.vllm.max_model_len is None
    vm.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(nodes: Nodes, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*nodes.daemon, client_name="app"), nodes_loaded=True)


def choose(dialog: AddModelDialog, runtime: str) -> None:
    index = dialog.runtime.findData(runtime)
    dialog.runtime.setCurrentIndex(index)
    dialog.runtime.activated.emit(index)


def place(dialog: AddModelDialog, qtbot: Any, node: str) -> None:
    dialog.node.clear()
    qtbot.keyClicks(dialog.node, node)


@pytest.mark.gui
def test_the_wizard_asks_vllm_for_its_image_and_mlx_for_no_context(window: MainWindow, nodes: Nodes,
                                                                   qtbot: Any) -> None:
    win = window
    with add_model_dialog(win.ctx, win) as dialog:
        qtbot.waitUntil(lambda: len(dialog.vm.state.value.nodes) == 2)
        dialog.source_buttons.button(1).click()  # a file on the node
        place(dialog, qtbot, "gpu-box")
        qtbot.waitUntil(lambda: dialog.runtime.findData("vllm") >= 0)
        assert not dialog.image.isVisible() and dialog.ctx_size.isVisible()
        assert dialog.path.placeholderText() == "/path/to/model.gguf (on the node)"

        choose(dialog, "vllm")
        assert dialog.image.isVisible() and dialog.image.placeholderText() == NODE_IMAGE
        assert "folder" in dialog.path.placeholderText() and "max model length" in dialog.ctx_size.placeholderText()
        qtbot.keyClicks(dialog.path, "/models/Qwen2.5-7B-Instruct-AWQ")
        qtbot.keyClicks(dialog.image, "mirror.local/vllm:v1")
        qtbot.keyClicks(dialog.ctx_size, "4096")
        qtbot.keyClicks(dialog.model_id, "qwen-awq")
        assert not dialog.fit_button.isEnabled() and dialog.add_button.isEnabled()
        dialog.add_button.click()
        qtbot.waitUntil(lambda: bool(dialog.vm.state.value.done_ids or dialog.vm.state.value.error), timeout=10_000)
        assert dialog.vm.state.value.done_ids == ("qwen-awq",), dialog.vm.state.value.error
        model = nodes.daemon.call(lambda deps: deps.registry.require("qwen-awq"))
        assert (model.runtime, model.image, model.vllm.max_model_len) == ("vllm", "mirror.local/vllm:v1", 4096)

        place(dialog, qtbot, "studio")
        qtbot.waitUntil(lambda: dialog.runtime.findData("mlx") >= 0)
        choose(dialog, "mlx")
        assert not dialog.image.isVisible() and not dialog.ctx_size.isVisible()


@pytest.mark.gui
@pytest.mark.parametrize("size", [(1280, 800), (1024, 700)])
def test_a_refusal_is_said_in_plain_words_and_the_fields_keep_their_size(window: MainWindow, qtbot: Any,
                                                                         size: tuple[int, int]) -> None:
    from PySide6.QtWidgets import QApplication

    win = window
    win.resize(*size)
    with add_model_dialog(win.ctx, win) as dialog:
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
