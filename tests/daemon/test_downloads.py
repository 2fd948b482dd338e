"""The Downloads page's verbs through the real daemon, its agent child and the fake hub: a pause keeps
the partial file, a resume goes on from it with a Range request and ends with the hub's SHA-256, a
cancel deletes the partial, a failed download says why and a retry succeeds, and the finished ones
are still listed after the daemon restarts."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from agent.api.sources import HfFileRef, TransferState
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.sources import DownloadQuery, Transfer
from daemon.sources.transfer_log import RateMeter, TransferLog
from tests.daemon.harness import running_daemon
from tests.daemon.test_sources_api import hf_env, transfer_end  # noqa: F401 - the fixture
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

REPO = "acme/big-GGUF"
MIB = 2**20


async def wait_for(client: DaemonClient, transfer_id: str, ok: object, timeout: float = 60) -> Transfer:
    """The transfer once ``ok(transfer)`` holds, woken by the daemon's event feed."""
    since = (await client.status()).last_event_id
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        transfer = await client.transfer(transfer_id)
        if ok(transfer):  # type: ignore[operator]
            return transfer
        since = (await client.events(since, timeout=1)).last_id
    raise AssertionError(f"transfer {transfer_id} never got there: {await client.transfer(transfer_id)}")


async def retry_once_the_node_is_back(client: DaemonClient, transfer_id: str, timeout: float = 60) -> Transfer:
    """Retry ``transfer_id`` as soon as its node's agent answers again (it is restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await client.retry_transfer(transfer_id)
        except DaemonError as exc:
            if exc.status not in (502, 503, 504) or time.monotonic() > deadline:
                raise
        await client.events((await client.status()).last_event_id, timeout=0.5)  # the node's return is evented


def folder_of(home: Path) -> Path:
    return home / "agent" / "models" / REPO.replace("/", "--")


async def test_pause_keeps_the_partial_and_resume_goes_on_from_it_with_a_range(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    big = hub.add(REPO, "big-Q4_K_M.gguf", gguf_bytes() + bytes(range(256)) * 16_000, chunk_delay=0.05)
    hub.add(REPO, "other-Q8_0.gguf", gguf_bytes() + bytes(3_000_000), chunk_delay=0.05)
    home = tmp_path / "home"
    try:
        async with running_daemon(home, fake_runtime) as d:
            started = await d.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q4_K_M"), model_id="big"))
            assert started.pausable
            await wait_for(d.client, started.id, lambda t: t.bytes_done > 0)
            paused = await d.client.pause_transfer(started.id)
            assert paused.state.value == "paused" and paused.speed_bps is None
            partial = folder_of(home) / ".big-Q4_K_M.gguf.partial"
            kept = partial.stat().st_size
            assert 0 < kept < len(big.data)  # the bytes fetched so far stay on disk
            assert not (folder_of(home) / "big-Q4_K_M.gguf").exists()

            big.chunk_delay = 0.0
            asked_before = len(hub.requests("cdn"))
            resumed = await d.client.resume_transfer(started.id)
            assert resumed.id == started.id and resumed.state.value in ("queued", "running")
            done = await wait_for(d.client, started.id, lambda t: t.registered or t.state.value == "failed")
            assert done.state.value == "done" and done.registered == ["big"], done
            ranges = [s.headers.get("Range") for s in hub.requests("cdn")[asked_before:]]
            assert ranges == [f"bytes={kept}-"]
            final = folder_of(home) / "big-Q4_K_M.gguf"
            assert hashlib.sha256(final.read_bytes()).hexdigest() == big.sha256
            assert not partial.exists()

            with pytest.raises(DaemonError) as caught:  # a done one has nothing to resume
                await d.client.resume_transfer(started.id)
            assert (caught.value.status, caught.value.code) == (409, "transfer_refused")
            assert "done" in caught.value.message
            for verb in (d.client.pause_transfer, d.client.resume_transfer, d.client.cancel_transfer,
                         d.client.retry_transfer):
                with pytest.raises(DaemonError) as caught:
                    await verb("x999")
                assert (caught.value.status, caught.value.code) == (404, "transfer_not_found")

            other = await d.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q8_0")))
            await wait_for(d.client, other.id, lambda t: t.bytes_done > 0)
            await d.client.pause_transfer(other.id)
            other_partial = folder_of(home) / ".other-Q8_0.gguf.partial"
            assert other_partial.stat().st_size > 0
            cancelled = await d.client.cancel_transfer(other.id)
            assert cancelled.state.value == "cancelled"
            assert not other_partial.exists() and not other_partial.with_suffix(".partial.json").exists()
    finally:
        await hub.close()


async def test_a_failed_download_says_why_a_retry_succeeds_and_the_list_outlives_a_restart(
        tmp_path: Path, fake_runtime: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    good = gguf_bytes() + bytes(100_000)
    item = hub.add(REPO, "flaky-Q4_K_M.gguf", good, serve=good[:-1] + b"\x01")  # the bytes do not match the hash
    home = tmp_path / "home"
    try:
        async with running_daemon(home, fake_runtime) as d:
            started = await d.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q4_K_M"), model_id="flaky"))
            failed = await wait_for(d.client, started.id, lambda t: t.state.value in ("done", "failed"))
            assert failed.state.value == "failed" and "checksum" in (failed.error or ""), failed
            with pytest.raises(DaemonError) as caught:
                await d.client.resume_transfer(started.id)
            assert caught.value.status == 409 and "retry" in caught.value.message

            item.serve = None  # the hub behaves again
            await d.client.retry_transfer(started.id)
            done = await wait_for(d.client, started.id, lambda t: t.registered or t.state.value == "failed")
            assert done.state.value == "done" and done.error is None and done.registered == ["flaky"]
            with pytest.raises(DaemonError) as caught:
                await d.client.retry_transfer(started.id)
            assert (caught.value.status, caught.value.code) == (409, "transfer_refused")

            item.serve = good[:-1] + b"\x02"  # fails again; then its node's agent restarts and forgets it
            second = await d.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q4_K_M"),
                                                           register_models=False))
            await wait_for(d.client, second.id, lambda t: t.state.value == "failed")
            agent = d.daemon.local_agent
            assert agent is not None and agent.process is not None
            old = agent.process
            old.terminate()
            await old.wait()  # gone; the daemon starts it again
            item.serve = None
            retried = await retry_once_the_node_is_back(d.client, second.id)
            assert agent.process is not None and agent.process.pid != old.pid
            assert retried.agent_id != second.agent_id  # the daemon sent the request anew
            done = await wait_for(d.client, second.id, lambda t: t.state.value in ("done", "failed"))
            assert done.state.value == "done", done

        async with running_daemon(home, fake_runtime) as again:
            listed = {t.id: t for t in await again.client.transfers()}
            assert listed[started.id].state.value == "done" and listed[started.id].label.startswith(REPO)
            later = await again.client.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q4_K_M"),
                                                              register_models=False))
            assert later.id != started.id  # ids go on after the kept ones
    finally:
        await hub.close()


def test_speed_and_time_left_follow_the_progress_reported() -> None:
    now = [100.0]
    meter = RateMeter(clock=lambda: now[0])
    assert meter.sample(0) is None  # one sample: no speed yet
    now[0] += 2
    assert meter.sample(20 * MIB) == 10 * MIB
    assert RateMeter.eta(meter.speed, 20 * MIB, 120 * MIB) == 10.0
    now[0] += 1
    slower = meter.sample(22 * MIB)
    assert slower is not None and 2 * MIB < slower < 10 * MIB  # smoothed, not the last second alone
    assert meter.sample(0) is None  # it started over: no speed until the next sample
    assert RateMeter.eta(None, 0, 100) is None and RateMeter.eta(5.0, 0, None) is None


def test_the_kept_history_is_bounded_and_an_unreadable_one_starts_empty(tmp_path: Path) -> None:
    log = TransferLog(tmp_path / "transfers.json", keep=3)
    log.save([Transfer(id=f"x{n}", kind="hf", label=f"acme/m{n}", state=TransferState.DONE) for n in range(1, 6)])
    assert [t.id for t in log.load()] == ["x3", "x4", "x5"]
    (tmp_path / "transfers.json").write_text("{not json")
    assert log.load() == []


async def test_a_mirror_the_daemon_no_longer_has_the_request_of_is_refused_a_retry_saying_why(
        tmp_path: Path) -> None:
    from agent.api.sources import TransferInfo

    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        info = TransferInfo(id="", kind="mirror", label="tiny.gguf -> beta", state=TransferState.RUNNING,
                            files=["tiny.gguf"], created_at=time.time(), pausable=True)
        owned = await rd.daemon.transfers.own("beta", info)  # as one listed from before a restart
        await rd.daemon.transfers.update(owned.id, owned.model_copy(update={"state": TransferState.FAILED,
                                                                            "error": "the node went away"}))
        with pytest.raises(DaemonError) as refused:
            await rd.client.retry_transfer(owned.id)
        assert refused.value.status == 409 and refused.value.code == "transfer_refused"
        assert "no longer has its request" in refused.value.message and "start the mirror anew" in refused.value.message
        assert (await rd.client.transfer(owned.id)).state == TransferState.FAILED  # nothing changed
