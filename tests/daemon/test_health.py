"""Models that look after themselves: crash restarts, pauses that survive a restart, stall probes,
idle unload and the bounded wait queue, against the real daemon and agent with the fake runtime.

One daemon and agent serve the module's tests but the first (which restarts its daemon): each test
sets the fake's switches (the daemon's runtime is one wrapper, rewritten; a start runs what it says
then), adds its own model (its own id, served as ``m``: no crash count or gate carries over) and the
fixture removes it after."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

FAST = {"health": {"backoff_s": [0.2, 0.4, 0.6], "crash_limit": 3, "tick_s": 0.1,
                   "probe_interval_s": 3600, "healthy_reset_s": 3600}}
SHARED = pytest.mark.asyncio(loop_scope="module")  # the tests on the module's daemon


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[RunningDaemon, Path]]:
    root = tmp_path_factory.mktemp("health")
    runtime = write_fake_runtime(root / "bin")
    async with running_daemon(root / "home", runtime, **FAST) as d:
        yield d, runtime


@pytest_asyncio.fixture(loop_scope="module")
async def d(shared: tuple[RunningDaemon, Path]) -> AsyncIterator[RunningDaemon]:
    """The module's daemon; the test's models are stopped and removed after it."""
    running, _runtime = shared
    yield running
    for definition in running.daemon.registry.all():
        with contextlib.suppress(DaemonError):  # a model that failed to start has nothing to stop
            await running.client.stop_model(definition.id)
        await running.client.delete_model(definition.id)


@pytest.fixture
def fake(shared: tuple[RunningDaemon, Path]) -> Callable[..., None]:
    """``fake(token_delay_s=0.1)``: the daemon's runtime has these switches from its next start."""
    runtime = shared[1]

    def switches(**given: object) -> None:
        write_fake_runtime(runtime.parent, runtime.name, **given)

    return switches


async def _events_until(d: RunningDaemon, wanted: str, model_id: str, since: int = 0, timeout: float = 60) -> list:
    seen = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        page = await d.client.events(since, timeout=max(0.1, min(5, deadline - loop.time())))
        since = page.last_id
        seen += [e for e in page.events if e.model == model_id]
        if any(e.type == wanted for e in seen):
            return seen
        assert loop.time() < deadline, f"no {wanted} event; saw {[e.type for e in seen]}"


async def test_crashes_restart_with_backoff_then_pause_until_a_manual_start(tmp_path: Path, model_file: Path) -> None:
    crashing = write_fake_runtime(tmp_path / "bin", crash_after_s=0.3)
    home = tmp_path / "home"
    async with running_daemon(home, crashing, **FAST) as d:
        await d.client.create_model(model("m", str(model_file)))
        first = await d.client.start_model("m", wait=True)
        seen = await _events_until(d, "model.restarts_paused", "m")
        crashes = [e for e in seen if e.type == "model.crashed"]
        assert [e.data["crashes"] for e in crashes] == [1, 2]
        assert [e.data["restart_in_s"] for e in crashes] == [0.2, 0.4]
        status = (await d.client.get_model("m")).status
        assert status.restarts_paused and status.crash_count == 3
        assert status.state == ModelState.FAILED and "Crashed 3 times" in status.error
        assert first.pid != status.pid or status.pid is None
        pauses = json.loads((home / "restart-pauses.json").read_text())
        assert pauses[0]["model"] == "m" and pauses[0]["crashes"] == 3

    async with running_daemon(home, crashing, **FAST) as d:  # the pause survives a daemon restart
        status = (await d.client.get_model("m")).status
        assert status.restarts_paused and status.crash_count == 3
        started = await d.client.start_model("m")  # by hand: clears the pause
        assert not started.restarts_paused and started.crash_count == 0
        assert json.loads((home / "restart-pauses.json").read_text()) == []
        await d.client.stop_model("m")


@SHARED
async def test_a_stop_by_hand_is_not_a_crash(d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    fake(token_delay_s=0.02, tokens=8)
    await d.client.create_model(model("by-hand", str(model_file), served_name="m"))
    await d.client.start_model("by-hand", wait=True)
    since = (await d.client.status()).last_event_id
    await d.client.stop_model("by-hand")
    page = await d.client.events(since, timeout=0.5)
    assert [e.type for e in page.events if e.type.startswith("model.") and e.type != "model.state"] == []
    assert (await d.client.get_model("by-hand")).status.crash_count == 0


@SHARED
async def test_a_stalled_runtime_is_found_by_the_work_path_probe(d: RunningDaemon, fake: Callable[..., None],
                                                                 model_file: Path) -> None:
    # Past the agent's first-sight check of the build (else the start waits out its 15 s), then wedged.
    fake(stall_after=1)
    policy = d.daemon.health.policy
    d.daemon.health.policy = policy.model_copy(update={"probe_interval_s": 0.2, "probe_timeout_s": 0.5})
    try:
        await d.client.create_model(model("probed", str(model_file), served_name="m"))
        status = await d.client.start_model("probed", wait=True)
        assert status.state == ModelState.READY  # /health says ok...
        seen = await _events_until(d, "model.crashed", "probed")
        stall = next(e for e in seen if e.type == "model.stalled")  # ...but nothing generates
        assert "probe" in stall.data["reason"]
    finally:
        d.daemon.health.policy = policy


@SHARED
async def test_idle_model_unloads_and_comes_back_on_request(d: RunningDaemon, fake: Callable[..., None],
                                                            model_file: Path) -> None:
    fake(token_delay_s=0.02, tokens=8)
    await d.client.create_model(model("idle", str(model_file), served_name="m", idle_unload_seconds=1,
                                      start_on_request=True))
    await d.client.start_model("idle", wait=True)
    await _events_until(d, "model.unloaded", "idle")
    assert (await d.wait_state("idle", ModelState.STOPPED)).crash_count == 0
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(f"{d.v1}/chat/completions", json=body) as r:
            assert r.status == 200
    assert (await d.client.get_model("idle")).status.state == ModelState.READY


@SHARED
async def test_queue_serves_slots_plus_queue_and_refuses_the_rest(d: RunningDaemon, fake: Callable[..., None],
                                                                  model_file: Path) -> None:
    fake(token_delay_s=0.05, tokens=14)  # 0.7 s an answer: all ten arrive while the first is answered
    await d.client.create_model(model("queued", str(model_file), served_name="m", settings={"parallel": 1},
                                      max_queue=3))
    await d.client.start_model("queued", wait=True)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        async def one() -> tuple[int, str | None, str | None]:
            async with session.post(f"{d.v1}/chat/completions", json=body) as r:
                data = await r.json()
                code = data.get("error", {}).get("code") if r.status != 200 else None
                return r.status, code, r.headers.get("Retry-After")
        results = await asyncio.gather(*[one() for _ in range(10)])
    served = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 503]
    assert len(served) == 4 and len(refused) == 6  # 1 running + 3 queued
    assert all(code == "queue_full" and retry for _, code, retry in refused)


@SHARED
async def test_a_queued_client_that_leaves_frees_its_place(d: RunningDaemon, fake: Callable[..., None],
                                                           model_file: Path) -> None:
    fake(token_delay_s=0.1, tokens=100)
    await d.client.create_model(model("leaver", str(model_file), served_name="m", settings={"parallel": 1},
                                      max_queue=2))
    await d.client.start_model("leaver", wait=True)
    gate = d.daemon.router.gates.for_model("leaver", 1, 2)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with (
        aiohttp.ClientSession() as running,
        running.post(f"{d.v1}/chat/completions", json=body) as first,
    ):
        await first.content.readline()
        # One slot: the runtime takes a second request into its own backlog...
        second = asyncio.ensure_future(_post_json(d, body))
        await _until(lambda: gate.running == 2)
        queued = asyncio.ensure_future(_post_json(d, body))  # ...the third waits in the daemon
        await _until(lambda: gate.waiting == 1)
        queued.cancel()  # the queued client goes away
        await _until(lambda: gate.waiting == 0)
        assert gate.running == 2
        status = await _post_json(d, {**body, "stream": False, "max_tokens": 1}, wait=False)
        assert status is None  # its place is free again: the next one is queued, not refused
        second.cancel()


async def _post_json(d: RunningDaemon, body: dict, wait: bool = True) -> int | None:
    """The status of a request; with ``wait=False``, None if it is still queued after 0.5 s."""
    async with aiohttp.ClientSession() as session:
        request = asyncio.ensure_future(session.post(f"{d.v1}/chat/completions", json=body))
        done, _ = await asyncio.wait([request], timeout=None if wait else 0.5)
        if not done:
            request.cancel()
            return None
        async with request.result() as r:
            return r.status


async def _until(condition, timeout: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@SHARED
async def test_streams_end_promptly_when_the_runtime_dies_and_it_comes_back(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    import os
    import signal

    fake(token_delay_s=0.1, tokens=500)
    await d.client.create_model(model("killed", str(model_file), served_name="m", settings={"parallel": 5}))
    before = await d.client.start_model("killed", wait=True)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    loop = asyncio.get_running_loop()
    ended_at: list[float] = []

    async def stream(session: aiohttp.ClientSession, started: asyncio.Event) -> None:
        try:
            async with session.post(f"{d.v1}/chat/completions", json=body) as r:
                await r.content.readline()
                started.set()
                async for _ in r.content:
                    pass
        except aiohttp.ClientError:
            pass  # a broken stream is an acceptable, prompt ending
        ended_at.append(loop.time())

    async with aiohttp.ClientSession() as session:
        flags = [asyncio.Event() for _ in range(5)]
        tasks = [asyncio.ensure_future(stream(session, f)) for f in flags]
        await asyncio.gather(*(f.wait() for f in flags))
        killed_at = loop.time()
        os.kill(before.pid, signal.SIGKILL)
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert len(ended_at) == 5 and max(ended_at) - killed_at < 2.0  # no client hangs on a dead runtime
    await _events_until(d, "model.crashed", "killed")
    after = await d.wait_state("killed", ModelState.READY)
    assert after.pid != before.pid and after.crash_count == 1
    once = {**body, "stream": False, "max_tokens": 2}
    async with aiohttp.ClientSession() as session, session.post(f"{d.v1}/chat/completions", json=once) as r:
        assert r.status == 200
