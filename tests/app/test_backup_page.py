"""The Backup page against the real daemon: back up with a passphrase, see it in the list, restore
from a file — the preview table first, nothing changed until Restore, then applied; the model files a
restore must fetch, asked of a real node's agent (and the fake hub), downloaded only when ticked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import cells
from real_daemon import WORKSTATION

from app import format as fmt
from app.ui.main_window import PAGES, MainWindow
from app.ui.pages.backup import BackupPage
from app.viewmodels.backup import BackupViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition, ModelSource
from daemon.audit.log import AuditQuery
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

# vLLM models: no node is asked for their files on a restore (this daemon has no agent to ask).
ALPHA = ModelDefinition(id="alpha", served_name="alpha", model_path="/models/alpha", runtime="vllm", tags=["chat"])
BETA = ModelDefinition(id="beta", served_name="Beta-7B", model_path="/models/beta", runtime="vllm",
                       tags=["code", "chat"])


@pytest.fixture
def client(real_daemon: Any) -> DaemonClient:
    """The app's client of the real daemon holding alpha and beta (Beta-7B)."""
    real_daemon.hold_models(ALPHA, BETA)
    return DaemonClient(*real_daemon, client_name="app")


@pytest.fixture
def real_window(client: DaemonClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(client)


def _models(real_daemon: Any) -> dict[str, ModelDefinition]:
    return {d.id: d for d in real_daemon.call(lambda deps: deps.registry.all())}


def _lose_beta_and_edit_alpha(real_daemon: Any) -> None:
    """What the user did since the backup: beta removed, alpha's tags edited."""

    async def change(deps: Any) -> None:
        await deps.registry.remove("beta")
        alpha = next(d for d in deps.registry.all() if d.id == "alpha")
        await deps.registry.update(alpha.model_copy(update={"tags": ["edited"]}))

    real_daemon.call(change)


def test_backup_is_a_page_with_its_icon() -> None:
    assert ("backup", "Backup") in PAGES
    assert (Path(__file__).resolve().parents[2] / "resources" / "icons" / "nav-backup.svg").exists()


def test_backing_up_lists_the_file_and_a_restore_previews_before_it_applies(
        real_window: MainWindow, real_daemon: Any, qtbot: Any, tmp_path: Path) -> None:
    window = real_window
    window.show_page("backup")
    page: BackupPage = window.backup
    qtbot.waitUntil(lambda: page.vm.state.value.listing is not None, timeout=30_000)
    assert page.files.rowCount() == 0

    page.passphrase.setText("a good passphrase")
    page.confirm.setText("a good passphrase")
    page.backup_button.click()
    qtbot.waitUntil(lambda: page.files.rowCount() == 1, timeout=30_000)
    assert cells(page.files)[0][2] == "Encrypted"
    assert page.passphrase.text() == "" and page.confirm.text() == ""  # not left in the field

    target = tmp_path / "exported.json"
    page.passphrase.setText("a good passphrase")
    page.confirm.setText("a good passphrase")
    page.ask_save = lambda _parent: target
    page.save_file_button.click()
    qtbot.waitUntil(target.exists, timeout=30_000)
    assert target.stat().st_mode & 0o777 == 0o600

    # The user removes a model and edits another; the backup brings both back, after a preview.
    _lose_beta_and_edit_alpha(real_daemon)
    page.ask_open = lambda _parent: target
    page.restore_passphrase.setText("a good passphrase")
    page.open_button.click()
    qtbot.waitUntil(lambda: page.preview.rowCount() > 0, timeout=30_000)
    rows = {(r[1], r[2]): r for r in cells(page.preview)}
    assert rows[("Model", "alpha")][0] == "Changed" and rows[("Model", "alpha")][3] == "tags"
    assert rows[("Model", "Beta-7B")][0] == "New"
    assert "with encrypted secrets" in page.preview_note.text()
    assert "beta" not in _models(real_daemon) and page.apply_button.isEnabled()  # the preview changed nothing

    page.apply_button.click()
    qtbot.waitUntil(lambda: page.vm.state.value.result is not None, timeout=30_000)
    assert "beta" in _models(real_daemon) and _models(real_daemon)["alpha"].tags == ["chat"]
    assert page.preview.rowCount() == 0 and "Restored 2 change(s)." in page.preview_note.text()


def test_a_wrong_passphrase_says_so_and_restores_nothing(
        real_window: MainWindow, client: DaemonClient, real_daemon: Any, qtbot: Any, tmp_path: Path) -> None:
    window = real_window
    target = tmp_path / "b.json"
    vm = BackupViewModel(client)
    saved = asyncio.ensure_future(vm.save_to_file(target, "the right passphrase"))
    qtbot.waitUntil(saved.done, timeout=30_000)
    real_daemon.call(lambda deps: deps.registry.remove("beta"))
    restores = len(real_daemon.call(lambda deps: deps.audit.query(AuditQuery(action="backup.restore"))).entries)
    window.show_page("backup")
    page: BackupPage = window.backup
    page.ask_open = lambda _parent: target
    page.restore_passphrase.setText("the wrong passphrase")
    page.open_button.click()
    qtbot.waitUntil(lambda: page.vm.state.value.error is not None, timeout=30_000)
    assert "passphrase does not open" in page.preview_note.text()
    assert page.preview.rowCount() == 0 and not page.apply_button.isEnabled()
    assert "beta" not in _models(real_daemon)
    assert len(real_daemon.call(lambda deps: deps.audit.query(AuditQuery(action="backup.restore"))).entries) == \
        restores  # nothing restored


@pytest.fixture(scope="module")
def box(real_daemon: Any) -> Iterator[tuple[str, FakeHub]]:
    """A real node "box" (an in-process agent, paired) and the fake hub it asks (``HF_ENDPOINT``): the
    node's id and the hub holding alpha's file."""
    hub: FakeHub = real_daemon.call(lambda deps: FakeHub().start())
    hub.add("acme/alpha-GGUF", "alpha-Q4_K_M.gguf", gguf_bytes() + bytes(100_000))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_ENDPOINT", hub.hub_url)
        env.delenv("HF_TOKEN", raising=False)
        yield real_daemon.add_node("box"), hub
    real_daemon.call(lambda deps: hub.close())


def test_the_preview_lists_missing_model_files_and_the_checkbox_says_whether_to_download(
        real_daemon: Any, box: tuple[str, FakeHub], open_main_window: Callable[..., MainWindow], qtbot: Any,
        tmp_path: Path) -> None:
    node, hub = box
    pulled = ModelSource(hf_repo="acme/alpha-GGUF", hf_file="alpha-Q4_K_M.gguf")
    real_daemon.hold_models(
        ModelDefinition(id="alpha", served_name="alpha", model_path="/old/alpha.gguf", node=node, sources=pulled),
        ModelDefinition(id="beta", served_name="beta", model_path="/old/beta.gguf", node=node),
        ModelDefinition(id="gamma", served_name="gamma", model_path="/old/gamma.gguf"))  # on a node never online
    client = DaemonClient(*real_daemon, client_name="app")
    window = open_main_window(client)
    target = tmp_path / "b.json"
    saved = asyncio.ensure_future(BackupViewModel(client).save_to_file(target))
    qtbot.waitUntil(saved.done, timeout=30_000)
    window.show_page("backup")
    page: BackupPage = window.backup
    page.ask_open = lambda _parent: target
    size = fmt.size(len(hub.repos["acme/alpha-GGUF"]["alpha-Q4_K_M.gguf"].data))

    def preview() -> dict[str, list[str]]:
        page.open_button.click()
        qtbot.waitUntil(lambda: page.vm.state.value.preview is not None, timeout=30_000)
        return model_files()

    def model_files() -> dict[str, list[str]]:
        return {r[2].split(" on ")[0]: r for r in cells(page.preview) if r[1] == "Model file"}

    _lose_beta_and_edit_alpha(real_daemon)  # beta gone, alpha's tags edited: the restore has work to do
    files = preview()
    # each node by its name, in the item and in the daemon's note: never its id
    assert [files[m][2] for m in ("alpha", "beta", "gamma")] == [
        "alpha on box: /old/alpha.gguf", "beta on box: /old/beta.gguf", "gamma on workstation: /old/gamma.gguf"]
    assert "copy the file to box:/old/beta.gguf" in files["beta"][3]
    assert "node workstation not connected yet" in files["gamma"][3]
    assert not [c for row in cells(page.preview) for c in row if node in c or WORKSTATION in c]
    assert files["alpha"][0] == "Missing" and files["alpha"][3].startswith(f"Download from Hugging Face ({size})")
    assert files["beta"][3].startswith("Copy by hand — its definition names no source")
    # a node that could not be asked: marked so, and the restore leaves it as it is
    assert files["gamma"][0] == "Not checked" and files["gamma"][3].startswith("Left as it is: its node could not")
    assert page.apply_button.isEnabled() and page.downloads.isEnabled() and page.downloads.isChecked()

    page.downloads.setChecked(False)  # unticked: the row says the file stays missing, and the restore fetches nothing
    assert model_files()["alpha"][3] == (f"Not downloaded ({size}): downloading is unticked — copy the file to "
                                         "box:/old/alpha.gguf by hand, or tick it")
    page.apply_button.click()
    qtbot.waitUntil(lambda: page.vm.state.value.result is not None, timeout=30_000)
    note = page.preview_note.text()
    assert "Restored 2 change(s)." in note and "1 model file(s) to copy by hand" in note
    assert "Downloading" not in note and page.vm.state.value.result.transfers == []  # type: ignore[union-attr]
    assert model_files()["alpha"][3].startswith("Not downloaded")
    page.downloads.setChecked(True)
    assert model_files()["alpha"][3].startswith("Not downloaded"), "the restore done still says what it did"

    # nothing else differs now: a file to fetch is all the restore would do, so unticked it does nothing
    preview()
    assert page.apply_button.isEnabled()
    page.downloads.setChecked(False)
    assert not page.apply_button.isEnabled()
    assert "Nothing to restore unless the missing model files are downloaded." in page.preview_note.text()
    page.downloads.setChecked(True)
    page.apply_button.click()
    qtbot.waitUntil(lambda: page.vm.state.value.result is not None, timeout=30_000)
    note = page.preview_note.text()
    assert "Downloading 1 model file(s)" in note and "1 model file(s) to copy by hand" in note
    assert len(page.vm.state.value.result.transfers) == 1  # type: ignore[union-attr]
    assert ", transfer " in model_files()["alpha"][3]

    # the download brings alpha's file onto box, and alpha points at it there
    qtbot.waitUntil(lambda: _models(real_daemon)["alpha"].model_path != "/old/alpha.gguf", timeout=30_000)
    assert _models(real_daemon)["alpha"].model_path.endswith("alpha-Q4_K_M.gguf")
    assert _models(real_daemon)["beta"].model_path == "/old/beta.gguf"
