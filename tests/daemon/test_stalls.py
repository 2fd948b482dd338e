"""A runtime that goes silent mid-answer is cut and named; a long prompt is not silence.

The real daemon and agent with the fake llama-server's fault switches: ``silent_after`` wedges a
stream after some tokens (its connection held open), ``prompt_delay_s`` sends the headers at once
and the first token later, its ``/slots`` progress growing, as llama-server reads a long prompt;
``prompt_wedged`` stands still on the prompt. One daemon and agent serve the module: each test sets
the fake's switches (the daemon's runtime is one wrapper, rewritten; a start runs what it says
then), adds its own model (its own id, served as ``m``) and the fixture removes it after."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import openai
import pytest
import pytest_asyncio

from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the tests share the module's daemon


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[RunningDaemon, Path]]:
    root = tmp_path_factory.mktemp("stalls")
    runtime = write_fake_runtime(root / "bin")
    async with running_daemon(root / "home", runtime) as d:
        yield d, runtime


@pytest_asyncio.fixture(loop_scope="module")
async def d(shared: tuple[RunningDaemon, Path]) -> AsyncIterator[RunningDaemon]:
    """The module's daemon; the test's models are removed after it (each its own id: nothing a model
    went through, its stalls counted, its flags, carries over to the next test's)."""
    running, _runtime = shared
    yield running
    for definition in running.daemon.registry.all():
        with contextlib.suppress(DaemonError):  # a model that failed to start has nothing to stop
            await running.client.stop_model(definition.id)
        await running.client.delete_model(definition.id)


@pytest.fixture
def fake(shared: tuple[RunningDaemon, Path]) -> Callable[..., None]:
    """``fake(tokens=3, silent_after=2)``: the daemon's runtime has these switches from its next start."""
    runtime = shared[1]

    def switches(**given: object) -> None:
        write_fake_runtime(runtime.parent, runtime.name, **given)

    return switches


async def _rows(d: RunningDaemon) -> int:
    """How many rows the (shared) access log holds: a test's row is the one after them."""
    return len(await d.client.requests(limit=1000))


async def _read(session: aiohttp.ClientSession, url: str) -> tuple[list[bytes], str | None]:
    """Every SSE line the client got (comments too) and how the stream ended (None: complete)."""
    lines: list[bytes] = []
    async with session.post(url, json=STREAM) as resp:
        assert resp.status == 200
        try:
            async for line in resp.content:
                if line.strip():
                    lines.append(line.strip())
        except aiohttp.ClientPayloadError as exc:
            return lines, type(exc).__name__
    return lines, None


async def _until(check, what: str, seconds: float = 15) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        assert loop.time() < deadline, f"waited {seconds} s for {what}"
        await asyncio.sleep(0.05)


async def _stalled(d: RunningDaemon, model_id: str) -> str | None:
    return (await d.client.get_model(model_id)).status.stalled


async def test_a_silent_stream_is_cut_with_one_error_event_and_the_model_is_flagged_stalled(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    fake(tokens=8, silent_after=2)
    rows = await _rows(d)
    await d.client.create_model(model("silent", str(model_file), served_name="m", stall_timeout_s=1.0,
                                      heartbeat_s=0.5, settings={"parallel": 1}))
    await d.client.start_model("silent", wait=True)
    async with aiohttp.ClientSession() as session:
        lines, ended = await asyncio.wait_for(_read(session, f"{d.v1}/chat/completions"), 30)
    assert ended == "ClientPayloadError"  # cut without a final chunk: no client takes it for complete
    events = [json.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
    *answer, last = events
    assert [e["choices"][0]["delta"].get("content") for e in answer] == [None, "Hello", " from"]
    assert last["error"]["code"] == "upstream_stalled" and last["error"]["type"] == "server_error"
    assert "'m' went silent for 1 s" in last["error"]["message"]
    assert not any(line.startswith(b":") for line in lines)  # tokens flowed: no heartbeat needed

    status = (await d.client.get_model("silent")).status
    assert status.state == ModelState.READY and status.stalled and "went silent for 1 s" in status.stalled
    row = (await d.logged_requests(rows + 1))[-1]
    assert row.status == 504 and "went silent" in (row.error or "")

    # The slot is free again (one slot): a whole answer comes, and clears the flag.
    oa = openai.AsyncOpenAI(base_url=d.v1, api_key="none", max_retries=0, timeout=20)
    done = await oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content
    await _until(lambda: _no(_stalled(d, "silent")), "the Stalled flag to go after a completed answer")


async def _no(value) -> bool:  # type: ignore[no-untyped-def]
    return (await value) is None


async def test_a_long_prompt_gets_heartbeats_and_is_never_cut(d: RunningDaemon, fake: Callable[..., None],
                                                              model_file: Path) -> None:
    """The first token comes after 1 s (a long prompt, its /slots progress growing) with a 0.5 s stall
    time: it is never cut, heartbeats keep the client's stream alive, and the answer arrives whole."""
    fake(tokens=3, prompt_delay_s=1.0)
    await d.client.create_model(model("long-prompt", str(model_file), served_name="m", stall_timeout_s=0.5,
                                      heartbeat_s=0.15))
    await d.client.start_model("long-prompt", wait=True)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=0.75)) as session:
        lines, ended = await _read(session, f"{d.v1}/chat/completions")  # a 0.75 s read timeout holds
    assert ended is None and lines[-1] == b"data: [DONE]"
    first_data = next(i for i, line in enumerate(lines) if line.startswith(b"data:"))
    assert first_data >= 3 and all(line.startswith(b":") for line in lines[:first_data])
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                   for line in lines if line.startswith(b"data: {"))
    assert text == "Hello from the"
    assert await _stalled(d, "long-prompt") is None

    # The real openai client reads through the heartbeats as if they were not there.
    oa = openai.AsyncOpenAI(base_url=d.v1, api_key="none", max_retries=0)
    pieces = [c.choices[0].delta.content async for c in await oa.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True) if c.choices]
    assert "".join(p or "" for p in pieces) == "Hello from the"


async def test_a_prompt_that_stops_progressing_is_cut_and_the_model_flagged_stalled(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    """The runtime reads one batch of the prompt, then its /slots stand still: after heartbeats, one
    error event saying the prompt stopped progressing, the stream cut, the model flagged Stalled."""
    fake(tokens=3, prompt_wedged=True)
    rows = await _rows(d)
    await d.client.create_model(model("wedged", str(model_file), served_name="m", stall_timeout_s=1.0,
                                      heartbeat_s=0.25, settings={"parallel": 1}))
    await d.client.start_model("wedged", wait=True)
    async with aiohttp.ClientSession() as session:
        lines, ended = await asyncio.wait_for(_read(session, f"{d.v1}/chat/completions"), 30)
    assert ended == "ClientPayloadError"  # cut without a final chunk
    assert lines[0].startswith(b":")  # heartbeats while the prompt was awaited
    events = [json.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
    assert len(events) == 1 and events[0]["error"]["code"] == "upstream_stalled"
    assert "'m' stopped progressing on the prompt for 1 s" in events[0]["error"]["message"]

    status = (await d.client.get_model("wedged")).status
    assert status.state == ModelState.READY and status.stalled and "stopped progressing" in status.stalled
    row = (await d.logged_requests(rows + 1))[-1]
    assert row.status == 504 and "stopped progressing on the prompt" in (row.error or "")

    # The slot is free again (one slot): an answer that is not streamed comes, and clears the flag.
    oa = openai.AsyncOpenAI(base_url=d.v1, api_key="none", max_retries=0, timeout=20)
    done = await oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content
    await _until(lambda: _no(_stalled(d, "wedged")), "the Stalled flag to go after a completed answer")


@pytest.mark.parametrize("wedge", [{"silent_after": 1}, {"prompt_wedged": True}], ids=["mid_answer", "on_the_prompt"])
async def test_repeated_stalls_restart_the_model_as_a_crash(d: RunningDaemon, fake: Callable[..., None],
                                                            tmp_path: Path, model_file: Path,
                                                            wedge: dict[str, object]) -> None:
    starts = tmp_path / "starts.txt"
    fake(tokens=8, starts_file=starts, **wedge)
    policy = d.daemon.health.policy
    d.daemon.health.policy = policy.model_copy(update={"backoff_s": (0.1,)})
    try:
        await d.client.create_model(model("restarted", str(model_file), served_name="m", stall_timeout_s=0.4,
                                          heartbeat_s=0.2))
        await d.client.start_model("restarted", wait=True)
        since = (await d.client.status()).last_event_id
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                _lines, ended = await asyncio.wait_for(_read(session, f"{d.v1}/chat/completions"), 30)
                assert ended == "ClientPayloadError"

        async def restarted() -> bool:
            return len(starts.read_text().splitlines()) == 2 and \
                (await d.client.get_model("restarted")).status.state == ModelState.READY

        await _until(restarted, "the third stall to restart the model")
        page = await d.client.events(since)
        stalled = [e for e in page.events if e.type == "model.stalled"]
        assert len(stalled) == 1 and "3 answers cut for silence" in stalled[0].data["reason"]
        assert any(e.type == "model.crashed" for e in page.events)
    finally:
        d.daemon.health.policy = policy


@pytest.mark.parametrize(("fields", "said"), [
    ({"stall_timeout_s": 0}, "stall_timeout_s"),
    ({"stall_timeout_s": -5}, "stall_timeout_s"),
    ({"stall_timeout_s": 5, "heartbeat_s": 10}, "must be longer than heartbeat_s"),
])
async def test_a_stall_time_that_cannot_work_is_refused_with_the_reason(
        d: RunningDaemon, model_file: Path, fields: dict[str, float], said: str) -> None:
    body = {"id": "m", "served_name": "m", "model_path": str(model_file), **fields}
    async with aiohttp.ClientSession() as session, session.post(
            f"{d.url}/api/models", json=body, headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as r:
        answer = await r.json()
    assert r.status == 422 and said in json.dumps(answer)
    with pytest.raises(DaemonError):
        await d.client.get_model("m")  # nothing was saved


async def test_a_stream_that_waits_for_its_model_to_load_gets_heartbeats(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    """Started on request, the model loads for 1 s: the client (its read timeout 0.75 s) gets a 200
    and heartbeats meanwhile, then the answer."""
    fake(tokens=3, load_seconds=1.0)
    rows = await _rows(d)
    await d.client.create_model(model("loading", str(model_file), served_name="m", heartbeat_s=0.15))
    assert (await d.client.get_model("loading")).status.state == ModelState.STOPPED
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=0.75)) as session:
        lines, ended = await _read(session, f"{d.v1}/chat/completions")
    assert ended is None and lines[-1] == b"data: [DONE]"
    first_data = next(i for i, line in enumerate(lines) if line.startswith(b"data:"))
    assert first_data >= 3 and all(line.startswith(b":") for line in lines[:first_data])
    assert (await d.client.get_model("loading")).status.state == ModelState.READY
    row = (await d.logged_requests(rows + 1))[-1]
    assert row.status == 200 and row.model == "loading"


async def test_a_load_that_fails_after_heartbeats_is_the_streams_error_event(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    """The model cannot load in its startup time (it loads silently for 30 s; the agent gives up
    after 1 s without a line): the client already had a 200 and heartbeats, so the refusal comes as
    one error event in the OpenAI shape; the access log keeps its 503."""
    fake(load_seconds=30, load_quiet=True)
    rows = await _rows(d)
    await d.client.create_model(model("unloadable", str(model_file), served_name="m", heartbeat_s=0.25,
                                      startup_timeout_s=1.0))
    async with aiohttp.ClientSession() as session:
        lines, ended = await asyncio.wait_for(_read(session, f"{d.v1}/chat/completions"), 60)
    assert ended is None and lines[0].startswith(b":")
    events = [json.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
    assert len(events) == 1 and events[0]["error"]["code"] == "model_not_ready"
    assert "'m'" in events[0]["error"]["message"] and events[0]["error"]["request_id"]
    row = (await d.logged_requests(rows + 1))[-1]
    assert row.status == 503 and "model_not_ready" in (row.error or "")

    # The real openai client raises on that event: the caller sees the daemon's reason.
    oa = openai.AsyncOpenAI(base_url=d.v1, api_key="none", max_retries=0)
    with pytest.raises(openai.APIError, match="'m'"):
        async for _chunk in await oa.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
            pass


async def test_a_model_far_slower_than_its_history_is_flagged_slow(d: RunningDaemon, fake: Callable[..., None],
                                                                   model_file: Path) -> None:
    """Twelve streams at its usual speed, then the runtime gets eight times slower: Slow, with figures."""
    fake(tokens=12, token_delay_s=0.005, slow_after=12, slow_factor=8)
    await d.client.create_model(model("slowing", str(model_file), served_name="m"))
    await d.client.start_model("slowing", wait=True)
    async with aiohttp.ClientSession() as session:
        for _ in range(12):
            assert (await _read(session, f"{d.v1}/chat/completions"))[1] is None
        assert (await d.client.get_model("slowing")).status.slow is None
        for _ in range(3):
            assert (await _read(session, f"{d.v1}/chat/completions"))[1] is None
    slow = (await d.client.get_model("slowing")).status.slow
    assert slow is not None and "its usual" in slow and "tokens/s" in slow
    await d.client.stop_model("slowing")
    await d.client.start_model("slowing", wait=True)  # another start: its history no longer applies
    assert (await d.client.get_model("slowing")).status.slow is None
