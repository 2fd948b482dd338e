"""Model updates from the hub through the real daemon, its agent child and the fake hub: a pulled model
records its origin, a new revision shows as an update, the update fetches the new files beside the old
ones and restarts the running model on them, a roll back returns to the kept files; a hub that changes
a file without a new revision is refused, and updates or roll backs with nothing to go on say why."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from agent.api.sources import HfFileRef, SourceFile
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import ModelState
from daemon.api.sources import DownloadQuery
from tests.agent._sources_support import processes_running
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.daemon.test_sources_api import hf_env, transfer_end
from tests.fakes.fake_hf_hub import COMMIT, FakeHub
from tests.fakes.gguf_files import gguf_bytes

__all__ = ["hf_env"]  # the fixture, used by name

REPO, FILE, PROJECTOR = "acme/tiny-GGUF", "tiny-Q4_K_M.gguf", "mmproj-tiny-f16.gguf"
OLD, NEW = gguf_bytes() + bytes(1000), gguf_bytes() + bytes(2000)


async def pulled(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    await hub.start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add(REPO, FILE, OLD)
    hub.add(REPO, PROJECTOR, gguf_bytes(arch="clip"))


async def pull(d: RunningDaemon) -> None:
    since = (await d.client.status()).last_event_id
    started = await d.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q4_K_M"), model_id="tiny"))
    done, _ = await transfer_end(d.client, started.id, since)
    assert done.registered == ["tiny"], done.error or done.register_error


async def update_event(client: DaemonClient, since: int) -> None:
    """Wait (on the event feed) until the daemon says model 'tiny' has an update."""
    for _ in range(12):
        page = await client.events(since, timeout=5)
        since = page.last_id
        if any(e.type == "model.update_available" and e.model == "tiny" for e in page.events):
            return
    raise AssertionError("no model.update_available event for 'tiny'")


async def one(client: DaemonClient, check: bool = True) -> str:
    (found,) = await client.model_updates(check=check)
    assert found.model == "tiny"
    return found.state


async def test_a_new_revision_is_found_updated_onto_the_running_model_and_rolled_back(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = FakeHub()
    await pulled(hub, monkeypatch)
    try:
        async with running_daemon(tmp_path / "home", fake_runtime) as d:
            await pull(d)
            source = (await d.client.get_model("tiny")).definition.sources
            assert source is not None and source.revision == COMMIT  # the origin, recorded at the pull
            assert sorted(source.files, key=lambda f: f.path) == [
                SourceFile(path=PROJECTOR, sha256=hub.repos[REPO][PROJECTOR].sha256,
                           size=len(hub.repos[REPO][PROJECTOR].data)),
                SourceFile(path=FILE, sha256=hub.repos[REPO][FILE].sha256, size=len(OLD))]
            assert await one(d.client) == "current"
            old_path = (await d.client.get_model("tiny")).definition.model_path
            assert (await d.client.start_model("tiny", wait=True)).state == ModelState.READY

            since = (await d.client.status()).last_event_id
            new_commit = hub.publish(REPO, {FILE: NEW})
            daily = asyncio.ensure_future(d.daemon.model_updates.run(first_after_s=0, every_s=3600))
            try:  # the daemon's own check finds it, and says so as an event
                await update_event(d.client, since)
            finally:
                daily.cancel()
            (found,) = await d.client.model_updates()  # the last check's answer, kept
            assert (found.state, found.latest, found.revision) == ("available", new_commit, COMMIT)
            assert "changes its files" in (found.reason or "") and found.checked_at is not None

            started = await d.client.update_model_files("tiny")
            done, _ = await transfer_end(d.client, started.id, since)
            assert (done.state.value, done.registered, done.register_error) == ("done", ["tiny"], None)
            view = await d.client.get_model("tiny")
            new_path = view.definition.model_path
            assert new_path != old_path and Path(new_path).read_bytes() == NEW and Path(old_path).read_bytes() == OLD
            assert view.definition.sources is not None and view.definition.sources.revision == new_commit
            assert view.definition.extra_args[:2] == ["--mmproj", str(Path(new_path).parent / PROJECTOR)]
            status = await d.daemon.orchestrator.wait_settled("tiny", 30)
            assert status.state == ModelState.READY  # restarted on the new file
            assert processes_running(new_path) and not processes_running(old_path)
            updates = await d.client.model_updates(check=True)
            assert (updates[0].state, updates[0].can_roll_back, updates[0].previous_revision) == (
                "current", True, COMMIT)

            back = await d.client.rollback_model("tiny")
            assert back.definition.model_path == old_path and back.definition.sources is not None
            assert back.definition.sources.revision == COMMIT and back.definition.sources.previous is None
            assert back.definition.extra_args[:2] == ["--mmproj", str(Path(old_path).parent / PROJECTOR)]
            assert (await d.daemon.orchestrator.wait_settled("tiny", 30)).state == ModelState.READY
            assert processes_running(old_path) and not processes_running(new_path)
            assert await one(d.client) == "available"  # the newer revision is still there to take
            with pytest.raises(DaemonError) as caught:
                await d.client.rollback_model("tiny")
            assert (caught.value.status, caught.value.code) == (409, "nothing_to_roll_back")
    finally:
        await hub.close()


async def test_a_file_changed_without_a_new_revision_is_refused_and_nothing_changes(
        tmp_path: Path, fake_runtime: Path, model_file: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = FakeHub()
    await pulled(hub, monkeypatch)
    try:
        async with running_daemon(tmp_path / "home", fake_runtime) as d:
            await pull(d)
            before = (await d.client.get_model("tiny")).definition
            hub.add(REPO, FILE, NEW)  # new bytes under the same commit: the hub rewrote a file in place
            (found,) = await d.client.model_updates(check=True)
            assert found.state == "refused" and "without a new revision" in (found.reason or "")
            assert FILE in (found.reason or "") and found.latest == COMMIT
            with pytest.raises(DaemonError) as caught:
                await d.client.update_model_files("tiny")
            assert (caught.value.status, caught.value.code) == (409, "update_refused")
            assert "without a new revision" in caught.value.message
            assert (await d.client.get_model("tiny")).definition == before
            assert len(await d.client.transfers()) == 1  # the pull's only: nothing was fetched

            with pytest.raises(DaemonError) as caught:
                await d.client.rollback_model("tiny")
            assert (caught.value.status, caught.value.code) == (409, "nothing_to_roll_back")

            hub.add(REPO, FILE, OLD)  # the hub behaves again; then its new revision's file comes other than listed
            other = gguf_bytes() + b"\x01" * 2000  # as long as NEW, other bytes
            hub.publish(REPO, {FILE: NEW}, serve=other, etag=hashlib.sha256(other).hexdigest())
            assert await one(d.client) == "available"
            since = (await d.client.status()).last_event_id
            done, _ = await transfer_end(d.client, (await d.client.update_model_files("tiny")).id, since)
            assert done.state.value == "done" and done.registered == [], done.error
            assert "differ from the hub's listing" in (done.register_error or "")
            assert (await d.client.get_model("tiny")).definition == before  # still the old files

            await d.client.create_model(model("local-file", str(model_file)))
            for call in (d.client.update_model_files, d.client.rollback_model):
                with pytest.raises(DaemonError) as caught:
                    await call("local-file")
                assert (caught.value.status, caught.value.code) == (409, "no_hub_origin")
            assert [u.model for u in await d.client.model_updates()] == ["tiny"]  # a hub model's only

            await hub.close()  # the hub gone: said per model, not an error of the whole check
            (found,) = await d.client.model_updates(check=True)
            assert found.state == "failed" and "cannot reach the Hugging Face hub" in (found.reason or "")
    finally:
        await hub.close()
