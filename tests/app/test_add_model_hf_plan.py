"""The add-model wizard's "how it runs here" for a GGUF on Hugging Face, before anything is downloaded:
the plan asked for the Hugging Face file (each node reads only its header), its options listed, the
option picked sent with the download and found in the definition registered when the download is
done; a plan that fails is shown and the download still goes ahead. Over the real daemon: its nodes
(real agents with made-up GPUs, the fake llama-server) and the fake hub, the real widgets offscreen;
and the real daemon with its local agent child (the header read by ranges, the download registered
with the option picked)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import add_model_dialog, until
from PySide6.QtCore import Qt
from real_daemon import RealDaemon, daemon_in_thread, fake_hub_for, gpu_node

from agent.api.models import GpuInfo
from agent.api.sources import FINISHED_TRANSFERS, HfFileRef, TransferState
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observable import Emitter
from daemon.api.client import DaemonClient
from daemon.api.models import Event
from daemon.api.sources import DownloadQuery, Transfer
from tests.daemon.harness import running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

GiB = 1 << 30
REPO, FILE = "acme/tiny-GGUF", "tiny-Q4_K_M.gguf"
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}  # GiBs of KV cache
RTX = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", memory_total=24 * GiB, memory_used=GiB)


def stock(hub: FakeHub) -> FakeHub:
    """acme/tiny-GGUF: its Q4_K_M (weights past the header), its Q8_0 and Q6_K, and a file whose first
    answer the hub cuts short (the next one is whole)."""
    hub.add(REPO, FILE, gguf_bytes(**BIG) + bytes(1 << 20))
    hub.add(REPO, "tiny-Q8_0.gguf", gguf_bytes(**BIG))
    hub.add(REPO, "tiny-Q6_K.gguf", gguf_bytes(**BIG))
    hub.add(REPO, "tiny-IQ2_XS.gguf", gguf_bytes(**BIG) + bytes(1 << 20), cut_at=64, cut_times=1)
    return hub


class Fleet:
    def __init__(self, daemon: RealDaemon, hub: FakeHub, nodes: dict[str, str]) -> None:
        self.daemon, self.hub, self.nodes = daemon, hub, nodes


@pytest.fixture(scope="module")
def tower(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The daemon's one node "tower" (an RTX 4090, 23 GiB free) and the hub."""
    root = tmp_path_factory.mktemp("hf-plan")
    with fake_hub_for(real_daemon, root) as hub:
        yield Fleet(real_daemon, stock(hub), {"tower": gpu_node(real_daemon, root, "tower", [RTX])})


@asynccontextmanager
async def wizard(daemon: RealDaemon) -> AsyncIterator[AddModelViewModel]:
    """The wizard over the app's client with the fleet's events (the transfer's progress)."""
    client = DaemonClient(*daemon, client_name="app")
    feed = FleetViewModel(client, host_refresh_s=3600, poll_timeout=1)
    feed.start()
    await until(lambda: feed.snapshot.value.loaded, timeout=10)
    vm = AddModelViewModel(client, feed.events)
    await vm.load_nodes()
    try:
        yield vm
    finally:
        vm.close()
        await feed.stop()
        await client.close()


def hugging_face(vm: AddModelViewModel, file: str = FILE) -> None:
    vm.set_source("hf")
    vm.set_field("hf_repo", REPO)
    vm.set_field("hf_file", file)


async def download_done(vm: AddModelViewModel) -> Any:
    """The definition the daemon registered once the wizard's download is done."""
    transfer = vm.state.value.transfer
    assert transfer is not None and vm.state.value.error is None, vm.state.value.error
    await until(lambda: bool(vm.state.value.done_ids) or vm.state.value.error is not None, timeout=30,
                what="the download done")
    assert vm.state.value.error is None, vm.state.value.error
    return (await vm.client.get_model(vm.state.value.done_ids[0])).definition


async def test_the_plan_of_a_hugging_face_file_is_listed_and_the_pick_is_registered(tower: Fleet) -> None:
    async with wizard(tower.daemon) as vm:
        vm.set_source("hf")
        vm.set_field("hf_repo", REPO)
        assert not vm.state.value.can_plan, "a repo alone names no file"
        vm.set_field("hf_file", "Q4_K_M")
        assert vm.state.value.can_plan
        before = len(tower.hub.requests("cdn", "GET"))
        plan = await vm.check_plan()
        assert plan is not None and plan.source == f"hf:{REPO}/{FILE}", "the Hugging Face file, not a path"
        ranges = [r.headers.get("Range", "") for r in tower.hub.requests("cdn", "GET")[before:]]
        assert ranges and all(r.startswith("bytes=") for r in ranges), "only its header is read"
        assert await vm.client.transfers() == [], "nothing is downloaded to plan"
        s = vm.state.value
        gpu, cpu = s.plan_rows
        assert gpu.startswith("tower: GPU 0 (NVIDIA GeForce RTX 4090) · GPU · 32768 tokens of context")
        assert cpu.startswith("tower: CPU only · CPU") and "--device none" in cpu
        assert s.picked == 0
        vm.pick_option(1)  # the CPU
        vm.set_field("model_id", "tiny")
        await vm.add()
        transfer = vm.state.value.transfer
        assert transfer is not None and transfer.node == tower.nodes["tower"]
        registered = await download_done(vm)
        assert (registered.node, registered.settings.gpus, registered.settings.n_gpu_layers,
                registered.settings.ctx_size) == (tower.nodes["tower"], [], 0, 32768), \
            "the option picked runs the downloaded model"


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Fleet]:
    """A daemon of two nodes and the hub: "tower" (its RTX 4090 nearly full, 8 GiB of memory) and
    "gpu-box" (two 8 GiB GPUs: the model fits split over both)."""
    with daemon_in_thread(tmp_path / "home") as daemon, fake_hub_for(daemon, tmp_path) as hub:
        busy = RTX.model_copy(update={"memory_used": 20 * GiB})
        small = [GpuInfo(index=i, name="NVIDIA RTX A4000", memory_total=8 * GiB, memory_used=GiB // 2) for i in (0, 1)]
        yield Fleet(daemon, stock(hub), {"tower": gpu_node(daemon, tmp_path, "tower", [busy], memory_gib=(8, 4)),
                                         "gpu-box": gpu_node(daemon, tmp_path, "gpu-box", small, memory_gib=(8, 4))})


async def test_an_option_on_another_node_downloads_there_with_its_gpu_split(two_nodes: Fleet) -> None:
    box = two_nodes.nodes["gpu-box"]
    async with wizard(two_nodes.daemon) as vm:
        hugging_face(vm)
        vm.set_field("ctx_size", "16384")
        await vm.check_plan()
        s = vm.state.value
        assert s.plan is not None and s.plan.source == f"hf:{REPO}/{FILE}"
        picked = s.plan_rows[s.picked or 0]
        assert picked.startswith("gpu-box: GPUs 0,1 split by layers (1,1) · split across GPUs · 16384 tokens")
        assert s.picked is not None and s.node == box, "the best option is the one free now, on gpu-box"
        vm.set_field("model_id", "tiny")
        await vm.add()
        transfer = vm.state.value.transfer
        assert transfer is not None and transfer.node == box, "the file goes to the node that runs it"
        registered = await download_done(vm)
        assert registered.node == box
        assert (registered.settings.gpus, registered.settings.split_mode, registered.settings.tensor_split,
                registered.settings.n_gpu_layers, registered.settings.ctx_size) == ([0, 1], "layer", "1,1", 33, 16384)


async def test_another_file_drops_the_plan_and_no_pick_downloads_with_the_settings_as_typed(tower: Fleet) -> None:
    async with wizard(tower.daemon) as vm:
        hugging_face(vm)
        await vm.check_plan()
        assert vm.state.value.plan_rows
        vm.set_field("hf_file", "tiny-Q8_0.gguf")
        assert vm.state.value.plan is None and vm.state.value.plan_rows == () and vm.state.value.picked is None
        vm.set_field("model_id", "tiny-q8")
        await vm.add()
        registered = await download_done(vm)
        assert registered.model_path.endswith("tiny-Q8_0.gguf")
        assert (registered.settings.gpus, registered.settings.n_gpu_layers, registered.settings.ctx_size) == (
            None, None, None), "no option picked, no context typed: the defaults"


async def test_a_failing_plan_is_shown_and_the_download_still_works(tower: Fleet) -> None:
    async with wizard(tower.daemon) as vm:
        hugging_face(vm, "tiny-IQ2_XS.gguf")  # the hub cuts its first answer short
        vm.set_field("ctx_size", "4096")
        assert await vm.check_plan() is None
        s = vm.state.value
        assert s.plan_note.startswith("No plan: the hub sent a short answer for tiny-IQ2_XS.gguf; try again")
        assert "still add" in s.plan_note and s.can_add and s.error is None and s.plan_rows == ()
        vm.set_field("model_id", "tiny-iq2")
        await vm.add()
        registered = await download_done(vm)
        assert (registered.settings.ctx_size, registered.settings.gpus) == (4096, None)


# --- the real daemon and agent, the fake hub ---------------------------------------------------------
async def finished(client: DaemonClient, transfer_id: str, events: Emitter[Event]) -> Transfer:
    """Follow the daemon's event feed until the transfer is over, handing each event to the wizard."""
    since = 0
    ends = {s.value for s in FINISHED_TRANSFERS}
    while True:
        page = await client.events(since, timeout=5)
        for event in page.events:
            events.emit(event)
            if event.type == "transfer.state" and event.data.get("id") == transfer_id and event.data["state"] in ends:
                return await client.transfer(transfer_id)
        since = page.last_id


async def test_against_the_daemon_the_header_is_planned_and_the_download_runs_as_picked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)  # the agent child inherits these
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    weights = 4 << 20  # past the header: a whole-file read would show
    hub.add(REPO, FILE, gguf_bytes(name="Tiny", ctx=4096) + bytes(weights))
    hub.add(REPO, "tiny-Q8_0.gguf", gguf_bytes(name="Tiny", ctx=4096))
    try:
        async with running_daemon(tmp_path / "home", write_fake_runtime(tmp_path / "bin")) as rd:
            events: Emitter[Event] = Emitter()
            vm = AddModelViewModel(rd.client, events)
            await vm.load_nodes()
            hugging_face(vm, "Q4_K_M")
            vm.set_field("ctx_size", "2048")
            assert await vm.check_plan() is not None
            s = vm.state.value
            assert s.plan is not None and s.plan.source == f"hf:{REPO}/{FILE}" and s.plan_rows
            assert s.plan_rows[0].startswith("This machine: ") and "2048 tokens of context" in s.plan_rows[0]
            assert s.picked is not None and s.picked_option is not None
            ranges = [r.headers.get("Range", "") for r in hub.requests("cdn", "GET")]
            assert ranges and all(r.startswith("bytes=0-") and int(r.rsplit("-", 1)[1]) < weights for r in ranges), \
                "only the header was read"
            assert await rd.client.transfers() == [], "nothing downloaded to plan"
            option = s.picked_option
            vm.set_field("model_id", "tiny")
            await vm.add()
            assert vm.state.value.transfer is not None and vm.state.value.error is None
            done = await finished(rd.client, vm.state.value.transfer.id, events)
            assert done.state == TransferState.DONE and done.registered == ["tiny"], done.error or done.register_error
            saved = (await rd.client.get_model("tiny")).definition
            assert vm.state.value.done_ids == ("tiny",) and not vm.state.value.running
            assert saved.model_path.endswith(FILE) and saved.node == option.node
            assert (saved.settings.gpus, saved.settings.n_gpu_layers, saved.settings.ctx_size) == (
                option.settings.gpus, option.settings.n_gpu_layers if option.settings.n_gpu_layers is not None
                else option.n_gpu_layers, 2048), "the downloaded model runs as the option picked says"

            hugging_face(vm, "Q5_K_M")  # no such file: the plan says so, and nothing else breaks
            assert await vm.check_plan() is None
            assert vm.state.value.plan_note.startswith("No plan: ") and "Q5_K_M" in vm.state.value.plan_note
            assert vm.state.value.can_add

            # A placement the registry refuses (a helper node that does not exist): the file is kept
            # and the transfer says why it was not registered.
            transfer = await rd.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, file="tiny-Q8_0.gguf"),
                                                              model_id="helped", rpc_nodes=["elsewhere"]))
            done = await finished(rd.client, transfer.id, events)
            assert done.state == TransferState.DONE and done.registered == []
            assert done.register_error is not None and "rpc_nodes" in done.register_error
            assert Path(done.result[0].model_path).is_file()
            vm.close()
    finally:
        await hub.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(tower: Fleet, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*tower.daemon, client_name="app"))


@pytest.mark.gui
def test_the_wizard_plans_a_hugging_face_file_and_downloads_the_option_clicked(window: MainWindow, tower: Fleet,
                                                                               qtbot: Any) -> None:
    win = window
    with add_model_dialog(win.ctx, win) as dialog:
        qtbot.waitUntil(lambda: dialog.node.text() == "tower")
        assert dialog.vm.state.value.source == "hf"
        assert dialog.plan_button.isVisible() and not dialog.plan_button.isEnabled(), "no file named yet"
        qtbot.keyClicks(dialog.hf_repo, REPO)
        qtbot.keyClicks(dialog.hf_file, "Q6_K")
        qtbot.keyClicks(dialog.model_id, "tiny-q6")
        assert dialog.plan_button.isEnabled() and not dialog.plan_list.isVisible()
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_list.count() == 2, timeout=10_000)
        assert dialog.vm.state.value.plan.source == f"hf:{REPO}/tiny-Q6_K.gguf"  # type: ignore[union-attr]
        assert not any(t.label.endswith("Q6_K") for t in tower.daemon.call(lambda deps: deps.transfers.all())), \
            "nothing downloaded to plan"
        assert dialog.plan_list.isVisible() and dialog.plan_list.currentRow() == 0
        assert dialog.plan_list.item(0).text().startswith("tower: GPU 0 (NVIDIA GeForce RTX 4090) · GPU")
        dialog.plan_list.setCurrentRow(1)  # the CPU
        assert dialog.add_button.text() == "Download and add" and dialog.add_button.isEnabled()
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.vm.state.value.done_ids == ("tiny-q6",), timeout=30_000)
        registered = tower.daemon.call(lambda deps: deps.registry.require("tiny-q6"))
        assert (registered.settings.gpus, registered.settings.n_gpu_layers) == ([], 0)

        dialog.hf_file.clear()
        qtbot.keyClicks(dialog.hf_file, "Q5")
        assert not dialog.plan_list.isVisible(), "the old plan answered another file"
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_note.isVisible(), timeout=10_000)
        assert dialog.plan_note.text().startswith("No plan: no GGUF file in acme/tiny-GGUF matches 'Q5'")
        assert dialog.plan_note.property("role") == "error"
