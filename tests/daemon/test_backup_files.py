"""A restore onto a new machine and the model files it does not bring: a real daemon and its local
agent, the fake Hugging Face hub. The preview lists each model whose file is not on its node (to
download, or to copy by hand) and downloads nothing; the restore, when asked, downloads through a
transfer, points the model at the file and starts it when it is auto_start; the same backup
restored again leaves the model on the file it got."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.api.backup import MissingFile
from daemon.api.models import ModelSource, ModelState
from daemon.backup import document
from tests.daemon.harness import model, running_daemon
from tests.daemon.test_sources_api import transfer_end
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

REPO, FILE = "acme/tiny-GGUF", "tiny-Q4_K_M.gguf"


@pytest.fixture
def hf_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The agent child inherits these: the fake hub is set per test through ``HF_ENDPOINT``."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield


def _backup_of_another_machine(gone: Path) -> str:
    """A backup made elsewhere: its models' files are at paths this machine does not have."""
    models = [
        model("tiny", str(gone / FILE), auto_start=True, tags=["chat"],
              sources=ModelSource(hf_repo=REPO, hf_file=FILE, revision="main")),
        model("mine", str(gone / "fine-tuned.gguf")),  # made there: no source to fetch it from
        model("far", str(gone / "far.gguf"), node="box"),  # a node this daemon has not met
    ]
    contents = document.Contents(models=[m.model_dump(mode="json") for m in models], keys=[], nodes=[], settings={})
    return document.build(contents, None, None, created_at=time.time(), host="old-box",
                          daemon_version="test").decode()


def _by_model(files: list[MissingFile]) -> dict[str, MissingFile]:
    return {f.model_id: f for f in files}


async def test_a_restore_lists_the_missing_files_and_downloads_the_ones_it_can(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    data = gguf_bytes() + bytes(100_000)
    hub.add(REPO, FILE, data)
    text = _backup_of_another_machine(tmp_path / "old-machine" / "models")
    home = tmp_path / "new"
    try:
        async with running_daemon(home, fake_runtime) as new:
            preview = await new.client.preview_restore(text)
            files = _by_model(preview.missing_files)
            assert set(files) == {"tiny", "mine", "far"}
            tiny = files["tiny"]
            assert (tiny.state, tiny.fetch, tiny.node, tiny.size) == ("missing", "huggingface", "local", len(data))
            assert tiny.source == f"hf:{REPO}/{FILE}@main"
            assert (files["mine"].state, files["mine"].fetch) == ("missing", "by_hand")
            assert "copy the file to local:" in files["mine"].note
            assert files["far"].state == "unchecked" and "box" in files["far"].note
            assert await new.client.transfers() == []  # the preview fetched nothing
            assert not list((home / "agent" / "models").rglob("*.gguf"))
            assert "tiny" not in {v.definition.id for v in await new.client.list_models()}

            held = await new.client.restore_backup(text, downloads=False)  # ctl --no-downloads
            assert held.transfers == [] and await new.client.transfers() == []
            assert _by_model(held.missing_files)["tiny"].state == "missing"
            assert (await new.client.get_model("tiny")).definition.model_path == tiny.path

            since = (await new.client.status()).last_event_id
            result = await new.client.restore_backup(text)  # the models are here now: only the files change
            restored = _by_model(result.missing_files)
            assert result.transfers == [restored["tiny"].transfer] and restored["mine"].transfer is None
            done, _states = await transfer_end(new.client, result.transfers[0], since)
            assert done.state.value == "done" and done.registered == ["tiny"]
            view = await new.client.get_model("tiny")
            placed = Path(view.definition.model_path)
            assert placed.is_relative_to(home / "agent" / "models") and placed.read_bytes() == data
            assert view.definition.tags == ["chat"] and view.definition.sources is not None
            await new.wait_state("tiny", ModelState.READY)  # auto_start: started once its file arrived
            assert (await new.client.get_model("mine")).status.state == ModelState.STOPPED

            now = await new.client.preview_restore(await new.client.create_backup())  # this machine's own
            assert set(_by_model(now.missing_files)) == {"mine"}  # tiny's file is here; far was not restored
            again = await new.client.preview_restore(text)  # the same old backup: tiny keeps the file it got
            row = next(r for r in again.rows if (r.kind, r.id) == ("model", "tiny"))
            assert row.change == "identical" and str(placed) in (row.note or "")
            assert "tiny" not in _by_model(again.missing_files)
            await new.client.restore_backup(text)
            assert (await new.client.get_model("tiny")).definition.model_path == str(placed)
    finally:
        await hub.close()
