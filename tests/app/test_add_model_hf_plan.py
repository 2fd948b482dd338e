"""The add-model wizard's "how it runs here" for a GGUF on Hugging Face, before anything is downloaded:
the plan asked for the Hugging Face file (each node reads only its header), its options listed, the
option picked sent with the download and found in the definition registered when the download is
done; a plan that fails is shown and the download still goes ahead. Over the demo daemon (its own
plan), a hand-made two-node plan, the real widgets offscreen, and the real daemon and agent against
the fake hub (the header read by ranges, the file downloaded and registered with the option picked)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fake_sources import FakeSourcesClient
from helpers import add_model_dialog, add_model_vm, until
from PySide6.QtCore import Qt
from test_add_model_plan import BOX, gpu_box, two_node_plan

from agent.api.sources import FINISHED_TRANSFERS, HfFileRef, TransferState
from app.context import AppContext
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.observable import Emitter
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import Event
from daemon.api.plan import Plan, PlanQuery
from daemon.api.sources import DownloadQuery, Transfer
from tests.daemon.harness import running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

REPO, FILE = "acme/tiny-GGUF", "tiny-Q4_K_M.gguf"


class PlannedSources(FakeSourcesClient):
    """The sources fake answering ``plan`` with the plan the test made (None: the demo's own)."""

    def __init__(self) -> None:
        super().__init__()
        self.planned: Plan | None = None

    async def plan(self, query: PlanQuery) -> Plan:
        if self.planned is None:
            return await super().plan(query)
        self._record("plan", query)
        return self.planned


@pytest.fixture
async def setup() -> AsyncIterator[tuple[PlannedSources, AddModelViewModel]]:
    fake = PlannedSources()
    async with add_model_vm(fake) as vm:
        await vm.load_nodes()
        yield fake, vm


def hugging_face(vm: AddModelViewModel, file: str = FILE) -> None:
    vm.set_source("hf")
    vm.set_field("hf_repo", REPO)
    vm.set_field("hf_file", file)


async def download_done(fake: PlannedSources, vm: AddModelViewModel) -> None:
    transfer = vm.state.value.transfer
    assert transfer is not None and vm.state.value.running
    fake.advance(transfer.id, state=TransferState.DONE, stage="done")
    await until(lambda: bool(vm.state.value.done_ids))


async def test_the_plan_of_a_hugging_face_file_is_listed_and_the_pick_is_registered(
        setup: tuple[PlannedSources, AddModelViewModel]) -> None:
    fake, vm = setup
    vm.set_source("hf")
    vm.set_field("hf_repo", REPO)
    assert not vm.state.value.can_plan, "a repo alone names no file"
    vm.set_field("hf_file", "Q4_K_M")
    assert vm.state.value.can_plan
    assert await vm.check_plan() is not None
    query = fake.called("plan")[0][0]
    assert (query.node, query.model_path, query.hf.repo, query.hf.quant, query.hf.file) == (
        None, None, REPO, "Q4_K_M", None), "every node is asked about the Hugging Face file, not a path"
    assert not fake.called("download"), "nothing is downloaded to plan"
    s = vm.state.value
    gpu, cpu = s.plan_rows
    assert gpu.startswith("This machine: GPU 0 (NVIDIA GeForce RTX 4090) · GPU · 32768 tokens of context")
    assert cpu.startswith("This machine: CPU only · CPU") and "--device none" in cpu
    assert s.picked == 0
    vm.pick_option(1)  # the CPU
    vm.set_field("model_id", "tiny")
    await vm.add()
    download = fake.called("download")[0][0]
    assert (download.node, download.hf.quant, download.model_id) == ("local", "Q4_K_M", "tiny")
    assert download.settings is not None and (download.settings.gpus, download.settings.n_gpu_layers) == ([], 0)
    await download_done(fake, vm)
    registered = (await fake.get_model("tiny")).definition
    assert (registered.node, registered.settings.gpus, registered.settings.n_gpu_layers,
            registered.settings.ctx_size) == ("local", [], 0, 32768), "the option picked runs the downloaded model"


async def test_an_option_on_another_node_downloads_there_with_its_gpu_split(
        setup: tuple[PlannedSources, AddModelViewModel]) -> None:
    fake, vm = setup
    fake.planned = two_node_plan()
    fake.nodes.append(gpu_box())
    await vm.load_nodes()
    hugging_face(vm)
    vm.set_field("ctx_size", "8192")
    await vm.check_plan()
    s = vm.state.value
    assert fake.called("plan")[0][0].hf.file == FILE and fake.called("plan")[0][0].ctx_size == 8192
    assert s.plan_rows[2].startswith("gpu-box: GPUs 0 and 1 by layers · split across GPUs")
    assert s.picked == 2 and s.node == BOX, "the best option is the one free now, on gpu-box"
    vm.set_field("model_id", "tiny")
    await vm.add()
    download = fake.called("download")[0][0]
    assert download.node == BOX, "the file goes to the node that runs it"
    await download_done(fake, vm)
    registered = (await fake.get_model("tiny")).definition
    assert registered.node == BOX
    assert (registered.settings.gpus, registered.settings.split_mode, registered.settings.tensor_split,
            registered.settings.main_gpu, registered.settings.n_gpu_layers, registered.settings.ctx_size) == (
        [0, 1], "layer", "3,1", 0, 41, 8192)


async def test_another_file_drops_the_plan_and_no_pick_downloads_with_the_settings_as_typed(
        setup: tuple[PlannedSources, AddModelViewModel]) -> None:
    fake, vm = setup
    hugging_face(vm)
    await vm.check_plan()
    assert vm.state.value.plan_rows
    vm.set_field("hf_file", "tiny-Q8_0.gguf")
    assert vm.state.value.plan is None and vm.state.value.plan_rows == () and vm.state.value.picked is None
    await vm.add()
    assert fake.called("download")[0][0].settings is None, "no option picked, no context typed: the defaults"


async def test_a_failing_plan_is_shown_and_the_download_still_works(
        setup: tuple[PlannedSources, AddModelViewModel]) -> None:
    fake, vm = setup
    hugging_face(vm, "*.gguf")
    vm.set_field("ctx_size", "4096")
    fake.fail_next["plan"] = DaemonError(400, "invalid_source", "'*.gguf' matches several models in acme/tiny-GGUF")
    assert await vm.check_plan() is None
    s = vm.state.value
    assert s.plan_note.startswith("No plan: '*.gguf' matches several models") and "still add" in s.plan_note
    assert s.can_add and s.error is None and s.plan_rows == ()
    vm.set_field("model_id", "tiny")
    await vm.add()
    download = fake.called("download")[0][0]
    assert download.settings is not None and (download.settings.ctx_size, download.settings.gpus) == (4096, None)
    await download_done(fake, vm)
    assert (await fake.get_model("tiny")).definition.settings.ctx_size == 4096


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
def window(open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext, PlannedSources]:
    fake = PlannedSources()
    win = open_main_window(fake)
    return win, win.ctx, fake


@pytest.mark.gui
def test_the_wizard_plans_a_hugging_face_file_and_downloads_the_option_clicked(
        window: tuple[MainWindow, AppContext, PlannedSources], qtbot: Any) -> None:
    win, ctx, fake = window
    with add_model_dialog(ctx, win) as dialog:
        qtbot.waitUntil(lambda: bool(dialog.vm.state.value.nodes))
        assert dialog.vm.state.value.source == "hf"
        assert dialog.plan_button.isVisible() and not dialog.plan_button.isEnabled(), "no file named yet"
        qtbot.keyClicks(dialog.hf_repo, REPO)
        qtbot.keyClicks(dialog.hf_file, "Q4_K_M")
        assert dialog.plan_button.isEnabled() and not dialog.plan_list.isVisible()
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_list.count() == 2)
        assert fake.called("plan")[0][0].hf.quant == "Q4_K_M" and not fake.called("download")
        assert dialog.plan_list.isVisible() and dialog.plan_list.currentRow() == 0
        assert dialog.plan_list.item(0).text().startswith("This machine: GPU 0 (NVIDIA GeForce RTX 4090) · GPU")
        dialog.plan_list.setCurrentRow(1)  # the CPU
        assert dialog.add_button.text() == "Download and add" and dialog.add_button.isEnabled()
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(fake.called("download")))
        download = fake.called("download")[0][0]
        assert download.settings is not None and (download.settings.gpus, download.settings.n_gpu_layers) == ([], 0)

        fake.fail_next["plan"] = DaemonError(404, "not_found", "no GGUF file in acme/tiny-GGUF matches 'Q5'")
        dialog.hf_file.clear()
        qtbot.keyClicks(dialog.hf_file, "Q5")
        assert not dialog.plan_list.isVisible(), "the old plan answered another file"
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_note.isVisible())
        assert dialog.plan_note.text().startswith("No plan: no GGUF file in acme/tiny-GGUF matches 'Q5'")
        assert dialog.plan_note.property("role") == "error"
