"""Each node's runtimes in the app: badges on the Nodes page (available with the version, the others
greyed with the node's reason), and the add-model wizard picking a runtime only among the chosen
node's available ones. The real daemon with real agents: "alpha" (llama.cpp only: no Docker engine),
"gpu-box" (also vLLM 0.9.1: a fake Docker engine, ``tests/fakes/fake_docker_engine.py``, holds its
image) and "bare" (no llama-server at all)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import add_model_dialog

from app.context import AppContext
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.nodes import available_runtimes, runtime_badges
from daemon.api.client import DaemonClient
from daemon.api.nodes import NodeState, NodeView, RuntimeOffer
from tests.fakes.fake_docker_engine import FakeDockerEngine

BOX = "b" * 64
VLLM_IMAGE = "vllm/vllm-openai:v0.9.1"


def gpu_box() -> NodeView:
    return NodeView(id=BOX, name="gpu-box", state=NodeState.ONLINE, address="10.0.0.9:9443", runtimes=[
        RuntimeOffer(runtime="llamacpp", available=True, version="b4242 (fa4e1234)", location="/opt/llama-server",
                     digest="ab" * 32),
        RuntimeOffer(runtime="vllm", available=True, version="0.9.1", location="vllm/vllm-openai:v0.9.1"),
        RuntimeOffer(runtime="mlx", available=False, reason="MLX runs on Apple Silicon only")])


# --- view-models ----------------------------------------------------------------------------------
def test_badges_say_the_version_or_why_not() -> None:
    badges = runtime_badges(gpu_box())
    assert [(b.runtime, b.text, b.available) for b in badges] == [
        ("llamacpp", "llama.cpp b4242", True), ("vllm", "vLLM 0.9.1", True), ("mlx", "MLX", False)]
    assert badges[0].tooltip == "llama.cpp b4242 (fa4e1234)\n/opt/llama-server\nbuild abababababab"
    assert badges[2].tooltip == "MLX: MLX runs on Apple Silicon only"
    older = gpu_box().model_copy(update={"runtimes": gpu_box().runtimes[:1]})  # an agent without the others
    assert runtime_badges(older)[1].tooltip == "vLLM: this node's agent has no vLLM driver"
    assert runtime_badges(gpu_box().model_copy(update={"runtimes": []})) == ()
    assert available_runtimes(gpu_box()) == ("llamacpp", "vllm")
    assert available_runtimes(None) == ("llamacpp",)  # not reported: the default, refused at start if wrong


@pytest.fixture(scope="module")
def fleet(real_daemon: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """name -> node id of the module's three real agents (see the docstring)."""
    folder = tmp_path_factory.mktemp("docker")
    engine = real_daemon.call(lambda _deps: FakeDockerEngine(folder / "docker.sock", VLLM_IMAGE,
                                                             {"ai.vllm.version": "0.9.1"}).start())
    try:
        yield {"alpha": real_daemon.add_node("alpha"),
               "gpu-box": real_daemon.add_node("gpu-box", docker_socket=str(folder / "docker.sock"),
                                               vllm_image=VLLM_IMAGE),
               "bare": real_daemon.add_node("bare", llama_server=folder / "no-llama-server")}
    finally:
        real_daemon.call(lambda _deps: engine.close())


def _node(real_daemon: Any, node_id: str) -> NodeView:
    async def get(_deps: Any) -> NodeView:
        client = DaemonClient(*real_daemon)
        try:
            return await client.get_node(node_id)
        finally:
            await client.close()

    return real_daemon.call(get)  # type: ignore[no-any-return]


def test_the_nodes_report_their_runtimes(real_daemon: Any, fleet: dict[str, str]) -> None:
    assert available_runtimes(_node(real_daemon, fleet["alpha"])) == ("llamacpp",)  # no Docker engine there
    assert available_runtimes(_node(real_daemon, fleet["gpu-box"])) == ("llamacpp", "vllm")
    assert available_runtimes(_node(real_daemon, fleet["bare"])) == ()
    alpha = runtime_badges(_node(real_daemon, fleet["alpha"]))
    assert [b.available for b in alpha] == [True, False, False]
    assert "no Docker engine here" in alpha[1].tooltip


async def test_the_wizard_picks_a_runtime_among_the_chosen_nodes(real_daemon: Any, fleet: dict[str, str]) -> None:
    client = DaemonClient(*real_daemon, client_name="app")
    vm = AddModelViewModel(client)
    try:
        await vm.load_nodes()
        vm.set_field("node", "alpha")
        s = vm.state.value
        assert s.runtime == "llamacpp" and s.runtime_choices == (("llamacpp", "llama.cpp"),)
        assert [b.text for b in s.runtime_badges][1:] == ["vLLM", "MLX"]
        with pytest.raises(ValueError, match="vLLM is not offered here"):
            vm.set_runtime("vllm")

        vm.set_source("file")
        vm.set_field("node", "gpu-box")
        assert vm.state.value.runtime_choices == (("llamacpp", "llama.cpp"), ("vllm", "vLLM"))
        vm.set_runtime("vllm")
        vm.set_field("path", "/models/Qwen2.5-7B-Instruct-AWQ")
        vm.set_field("ctx_size", "32768")
        await vm.add()
        assert vm.state.value.error is None, vm.state.value.error
        (added,) = vm.state.value.done_ids
        saved = (await client.get_model(added)).definition
        assert (saved.runtime, saved.node, saved.vllm.max_model_len) == ("vllm", fleet["gpu-box"], 32768)
        await client.delete_model(added)

        vm.set_source("hf")  # a GGUF download: llama.cpp only
        assert vm.state.value.runtime == "llamacpp" and vm.state.value.runtime_choices == (("llamacpp", "llama.cpp"),)
        vm.set_source("file")
        vm.set_runtime("vllm")
        vm.set_field("node", "alpha")  # no vLLM there: back to llama.cpp
        assert vm.state.value.runtime == "llamacpp"

        vm.set_source("hf")
        vm.set_field("node", fleet["bare"][:8])
        vm.set_field("hf_repo", "acme/tiny-GGUF")
        vm.set_field("hf_file", "Q4_K_M")
        assert not vm.state.value.can_add and vm.state.value.runtime_choices == ()
        assert vm.state.value.runtime_note.startswith("No runtime for this model there. llama.cpp: no llama-server "
                                                      "found: build it with `make runtime`")
    finally:
        vm.close()
        await client.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(real_daemon: Any, fleet: dict[str, str],
           open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext]:
    win = open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)
    return win, win.ctx


@pytest.mark.gui
def test_the_nodes_page_shows_runtime_badges(window: tuple[MainWindow, AppContext], fleet: dict[str, str],
                                             qtbot: Any) -> None:
    win, ctx = window
    win.show_page("nodes")
    panel = win.nodes.panel
    ctx.nodes.select(fleet["gpu-box"])
    qtbot.waitUntil(lambda: panel.title.text() == "gpu-box")
    shown = [(b.objectName(), b.text(), b.isEnabled(), b.property("badge")) for b in panel.runtimes.badges]
    assert shown == [("runtime-llamacpp", "llama.cpp 11434.0.0", True, "ready"),
                     ("runtime-vllm", "vLLM 0.9.1", True, "ready"), ("runtime-mlx", "MLX", False, "unknown")]
    assert panel.runtimes.badges[2].toolTip() == "MLX: MLX needs a Mac with Apple Silicon"
    assert VLLM_IMAGE in panel.runtimes.badges[1].toolTip()
    assert not panel.runtimes.note.isVisible()


@pytest.mark.gui
def test_the_wizard_offers_only_the_chosen_nodes_runtimes(window: tuple[MainWindow, AppContext], qtbot: Any) -> None:
    win, ctx = window
    with add_model_dialog(ctx, win) as dialog:
        qtbot.waitUntil(lambda: len(dialog.vm.state.value.nodes) == 3)
        assert dialog.vm.state.value.node == "alpha"  # the daemon's first node
        items = lambda: [dialog.runtime.itemData(i) for i in range(dialog.runtime.count())]
        assert items() == ["llamacpp"] and not dialog.runtime.isEnabled()
        assert [b.isEnabled() for b in dialog.node_runtimes.badges] == [True, False, False]
        dialog.source_buttons.button(1).click()  # a file on the node
        dialog.node.clear()
        qtbot.keyClicks(dialog.node, "gpu-box")
        qtbot.waitUntil(lambda: items() == ["llamacpp", "vllm"])
        assert dialog.runtime.isEnabled() and dialog.runtime.currentData() == "llamacpp"
        assert [b.text() for b in dialog.node_runtimes.badges] == ["llama.cpp 11434.0.0", "vLLM 0.9.1", "MLX"]
        dialog.runtime.setCurrentIndex(1)
        dialog.runtime.activated.emit(1)
        assert dialog.vm.state.value.runtime == "vllm"
