"""The fault matrix: a fault injected in the middle of a streamed answer, at a token chosen by a
seeded random draw, and for each what the client sees and that nothing is lost or left running.

| fault (mid-stream)                        | the client sees                         | afterwards                                   |
|-------------------------------------------|-----------------------------------------|----------------------------------------------|
| the local runtime is stopped (SIGSTOP)    | tokens, then one `upstream_stalled`     | it runs again (SIGCONT): the next answer is  |
|                                           | event, the connection cut               | whole, on the same runtime, its slot free    |
| the local runtime is killed (SIGKILL)     | tokens, then one `upstream_broken`      | restarted through the crash path; the next   |
|                                           | event, the connection cut               | answer is whole, on a new runtime            |
| a remote node's agent is killed           | tokens, then one `upstream_broken`      | its agent starts again and adopts the        |
|                                           | event, the connection cut               | runtime (same PID); the next answer is whole |
| the wire to a remote node is cut          | tokens, then one `upstream_stalled`     | the wire is back: the node is online, the    |
|                                           | event after the model's stall time      | same runtime answers whole                   |
| a client reads 4 KiB and stops            | the rest of a 30 MB answer, once it     | the runtime is held back meanwhile (the relay |
|                                           | reads on                                | waits on the client, nothing piles up)        |
| the daemon restarts under 64 streams      | tokens, then one `server_stopping`      | the new daemon adopts the runtime (same PID) |
|                                           | event, the connection cut               | and all 64 next answers are whole            |

5,000 idle keep-alive connections: the daemon still serves /v1 and its admin API, and each of them
still answers. A disk that fills during a download is in ``tests/agent/test_download_disk_full.py``.

The cases on this machine's own runtime share one daemon and agent (``shared``): each sets the fake's
switches (the daemon's runtime is one wrapper, rewritten; a start runs what it says then) and adds its
own model (its own id, served as ``m``), which the ``d`` fixture removes after it. The remote cases, and
the restart (it stops its daemon), run a daemon of their own.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from daemon.api.models import ModelState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fleet.agents import eventually, kill_runtimes

pytestmark = [pytest.mark.slow]
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the cases that share the module's daemon

TOKENS = 40
# Between tokens: a fault strikes at token 2 to 12 of 40, so at least 28 tokens' time (0.84 s) is left
# between the client seeing its token and the answer's end; a whole answer takes 1.2 s.
TOKEN_DELAY_S = 0.03
MONITOR = {"interval_s": 0.5, "probe_timeout_s": 1.0, "offline_after": 3}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _fault_token(seed: int) -> int:
    """The token after which the fault strikes: drawn, but the same for the same seed."""
    return random.Random(seed).randint(2, 12)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[RunningDaemon, Path]]:
    """One daemon (a crash restarts after 0.2 s) and its agent for the cases on this machine's runtime."""
    root = tmp_path_factory.mktemp("fault-matrix")
    runtime = write_fake_runtime(root / "bin")
    async with running_daemon(root / "home", runtime, health={"backoff_s": [0.2]}) as running:
        yield running, runtime


@pytest_asyncio.fixture(loop_scope="module")
async def d(shared: tuple[RunningDaemon, Path]) -> AsyncIterator[RunningDaemon]:
    """The module's daemon; the case's models are removed after it (each its own id: nothing a model
    went through, its stall, its crash, carries over to the next case)."""
    running, _runtime = shared
    yield running
    for definition in running.daemon.registry.all():
        await running.client.stop_model(definition.id)
        await running.client.delete_model(definition.id)


@pytest.fixture
def fake(shared: tuple[RunningDaemon, Path]) -> Callable[..., None]:
    """``fake(tokens=4)``: the shared daemon's runtime has these switches from its next start."""
    runtime = shared[1]

    def switches(**given: object) -> None:
        write_fake_runtime(runtime.parent, runtime.name, **given)

    return switches


class Stream:
    """One streamed chat read as a client does: its content pieces, its error events, its ending."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.ended: str | None = None  # None: complete ([DONE] and a final chunk)
        self.done = False
        self.arrived = asyncio.Event()  # set at each content piece

    async def run(self, session: aiohttp.ClientSession, url: str) -> Stream:
        try:
            async with session.post(url, json=BODY) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    if line.startswith(b"data: [DONE]"):
                        self.done = True
                    elif line.startswith(b"data: "):
                        event = json.loads(line[6:])
                        if "error" in event:
                            self.errors.append(event["error"])
                        elif piece := event["choices"][0]["delta"].get("content"):
                            self.pieces.append(piece)
                            self.arrived.set()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            self.ended = type(exc).__name__
        return self

    async def until_pieces(self, count: int) -> None:
        while len(self.pieces) < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 30)


async def _whole(session: aiohttp.ClientSession, url: str) -> Stream:
    stream = await asyncio.wait_for(Stream().run(session, url), 60)
    assert stream.ended is None and stream.done and not stream.errors and len(stream.pieces) == TOKENS
    return stream


async def _status(rd: RunningDaemon, model_id: str = "m"):  # type: ignore[no-untyped-def]
    return (await rd.client.get_model(model_id)).status


@IN_MODULE_LOOP
@pytest.mark.parametrize("seed", [1, 2])
async def test_a_stopped_runtime_is_cut_as_stalled_and_serves_again_when_it_runs(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path, seed: int) -> None:
    fake(tokens=TOKENS, token_delay_s=TOKEN_DELAY_S)
    model_id = f"stopped-{seed}"
    await d.client.create_model(model(model_id, str(model_file), served_name="m", stall_timeout_s=1.0,
                                      heartbeat_s=0.5, settings={"parallel": 1}))
    ready = await d.client.start_model(model_id, wait=True)
    async with aiohttp.ClientSession() as session:
        stream = Stream()
        reading = asyncio.ensure_future(stream.run(session, f"{d.v1}/chat/completions"))
        at = _fault_token(seed)
        await stream.until_pieces(at)
        assert ready.pid is not None
        os.kill(ready.pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(reading, 30)
        finally:
            os.kill(ready.pid, signal.SIGCONT)
        assert stream.ended is not None and not stream.done
        assert [e["code"] for e in stream.errors] == ["upstream_stalled"]
        assert at <= len(stream.pieces) < TOKENS
        assert (await _status(d, model_id)).stalled
        # Running again: the slot the cut request held is free (one slot), the same runtime answers.
        await _whole(session, f"{d.v1}/chat/completions")
        status = await _status(d, model_id)
        assert status.pid == ready.pid and status.stalled is None


@IN_MODULE_LOOP
@pytest.mark.parametrize("seed", [3])
async def test_a_killed_runtime_breaks_the_stream_and_is_restarted(d: RunningDaemon, fake: Callable[..., None],
                                                                   model_file: Path, seed: int) -> None:
    fake(tokens=TOKENS, token_delay_s=TOKEN_DELAY_S)  # the shared daemon restarts a crash after 0.2 s
    await d.client.create_model(model("killed", str(model_file), served_name="m"))
    ready = await d.client.start_model("killed", wait=True)
    async with aiohttp.ClientSession() as session:
        stream = Stream()
        reading = asyncio.ensure_future(stream.run(session, f"{d.v1}/chat/completions"))
        await stream.until_pieces(_fault_token(seed))
        assert ready.pid is not None
        os.killpg(ready.pid, signal.SIGKILL)  # the runtime leads its own session
        await asyncio.wait_for(reading, 30)
        assert stream.ended is not None and not stream.done
        assert [e["code"] for e in stream.errors] == ["upstream_broken"]

        async def back():  # type: ignore[no-untyped-def]
            status = await _status(d, "killed")
            return status if status.state == ModelState.READY and status.pid != ready.pid else None

        await eventually(back, timeout=60, what="the crashed runtime restarted")
        await _whole(session, f"{d.v1}/chat/completions")


@pytest.mark.parametrize("seed", [4])
async def test_a_killed_remote_agent_breaks_the_stream_and_its_successor_adopts_the_runtime(
        agents: Any, rd: RunningDaemon, tmp_path: Path, model_file: Path, seed: int) -> None:
    runtime = write_fake_runtime(tmp_path / "slow-bin", tokens=TOKENS, token_delay_s=TOKEN_DELAY_S)
    where = {"home": tmp_path / "agent-far", "llama_server": runtime, "first_port": 38800}
    agent = await agents("far", **where)
    pairing = await agent.wait_event("pairing")
    node = await rd.client.pair_node(agent.address, pairing["code"], pairing["fingerprint"])
    await rd.client.create_model(model("m", str(model_file), node=node.id))
    ready = await rd.client.start_model("m", wait=True)
    assert ready.state == ModelState.READY and ready.pid in agent.runtime_pids()
    async with aiohttp.ClientSession() as session:
        stream = Stream()
        reading = asyncio.ensure_future(stream.run(session, f"{rd.v1}/chat/completions"))
        await stream.until_pieces(_fault_token(seed))
        agent.process.kill()  # the agent dies; its runtime, in a session of its own, lives on
        await asyncio.wait_for(reading, 30)
        assert stream.ended is not None and not stream.done
        assert [e["code"] for e in stream.errors] == ["upstream_broken"]

        await agents("far", **where, port=agent.port)  # started again on its address
        again = await eventually(lambda: _ready(rd), timeout=60, what="the node back with its model")
        assert again.pid == ready.pid  # adopted, not restarted
        await _whole(session, f"{rd.v1}/chat/completions")
    kill_runtimes([ready.pid or 0])


@pytest.mark.netns
@pytest.mark.parametrize("seed", [5])
async def test_a_cut_wire_is_a_stall_for_the_client_and_the_runtime_serves_again_when_it_is_back(
        netns: Any, agents: Any, tmp_path: Path, model_file: Path, seed: int) -> None:
    ns = netns()
    runtime = write_fake_runtime(tmp_path / "slow-bin", tokens=TOKENS, token_delay_s=TOKEN_DELAY_S)
    agent = await agents("far", host=ns.ns_ip, port=9443, netns=ns.name, llama_server=runtime)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=MONITOR) as rd:
        pairing = await agent.wait_event("pairing")
        node = await rd.client.pair_node(f"{ns.ns_ip}:9443", pairing["code"], pairing["fingerprint"])
        await rd.client.create_model(model("m", str(model_file), node=node.id, stall_timeout_s=1.0,
                                          heartbeat_s=0.5))
        ready = await rd.client.start_model("m", wait=True)
        async with aiohttp.ClientSession() as session:
            stream = Stream()
            reading = asyncio.ensure_future(stream.run(session, f"{rd.v1}/chat/completions"))
            await stream.until_pieces(_fault_token(seed))
            ns.cut()
            try:
                await asyncio.wait_for(reading, 30)
            finally:
                ns.restore()
            assert stream.ended is not None and not stream.done
            assert [e["code"] for e in stream.errors] == ["upstream_stalled"]
            again = await eventually(lambda: _ready(rd), timeout=60, what="the node back with its model")
            assert again.pid == ready.pid
            await _whole(session, f"{rd.v1}/chat/completions")


async def test_a_daemon_restarted_under_64_streams_adopts_the_runtime_and_serves_them_all_again(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=TOKENS, token_delay_s=0.05)
    home = tmp_path / "home"
    definition = model("m", str(model_file), settings={"parallel": 64}, max_queue=128)
    async with running_daemon(home, runtime) as d:
        await d.client.create_model(definition)
        ready = await d.client.start_model("m", wait=True)
        port = d.daemon.config.port
        async with aiohttp.ClientSession() as session:
            streams = [Stream() for _ in range(64)]
            readings = [asyncio.ensure_future(s.run(session, f"{d.v1}/chat/completions")) for s in streams]
            await asyncio.gather(*(s.until_pieces(2) for s in streams))
            await d.stop_server()  # the daemon stops (a restart, an update), the runtime keeps running
            await asyncio.wait_for(asyncio.gather(*readings), 30)
        assert all(s.ended is not None and not s.done for s in streams)  # none taken for complete
        # ... and each was told why: one error event saying the daemon stopped, to ask again
        assert [[e["code"] for e in s.errors] for s in streams] == [["server_stopping"]] * 64
        assert all("send the request again" in s.errors[0]["message"] for s in streams)

    async with running_daemon(home, runtime, port=port) as d2:
        again = await eventually(lambda: _ready(d2), timeout=60, what="the runtime adopted")
        assert again.pid == ready.pid
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(*(_whole(session, f"{d2.v1}/chat/completions") for _ in range(64)))


async def _ready(rd: RunningDaemon):  # type: ignore[no-untyped-def]
    """Ready and reachable: not the last state a node reported before it went quiet."""
    status = await _status(rd)
    return status if status.state == ModelState.READY and status.error is None and status.pid else None


@IN_MODULE_LOOP
async def test_5000_idle_keep_alive_connections_do_not_stop_the_daemon_serving(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    """Clients that open a connection, ask once and keep it open: the daemon still answers /v1 and
    its admin API, and every one of those connections is still usable."""
    fake(tokens=4)
    await d.client.create_model(model("idle", str(model_file), served_name="m"))
    await d.client.start_model("idle", wait=True)
    port = d.daemon.config.port
    request = f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await ask(reader, writer)
        held.append((reader, writer))

    try:
        for _ in range(25):  # 200 at a time: the listen backlog
            await asyncio.gather(*(one() for _ in range(200)))
        assert len(held) == 5000
        async with aiohttp.ClientSession() as session:
            stream = await asyncio.wait_for(Stream().run(session, f"{d.v1}/chat/completions"), 30)
        assert stream.done and len(stream.pieces) == 4
        assert (await d.client.status()).models
        await asyncio.gather(*(ask(r, w) for r, w in held[::50]))  # the idle ones still answer
    finally:
        for _reader, writer in held:
            writer.close()


@IN_MODULE_LOOP
async def test_a_client_that_reads_slowly_holds_the_runtime_back_not_the_daemons_memory(
        d: RunningDaemon, fake: Callable[..., None], model_file: Path) -> None:
    """An answer of 200,000 tokens (about 30 MB of SSE) to a client that reads 4 KiB and stops: the
    relay waits on the client (backpressure), so the runtime is held back a few socket buffers
    ahead instead of the daemon holding the whole answer; once the client reads on, all of it comes."""
    total = 200_000
    fake(tokens=total)
    await d.client.create_model(model("slow-client", str(model_file), served_name="m"))
    await d.client.start_model("slow-client", wait=True)
    instance = d.daemon.orchestrator.instance(d.daemon.registry.require("slow-client"))
    assert instance is not None and instance.endpoint
    headers = {"Authorization": f"Bearer {instance.api_key}"} if instance.api_key else {}
    logged = len(await d.client.requests(limit=1000))  # the shared access log's rows before this case's

    async with aiohttp.ClientSession() as session:
        async def generated() -> int:
            async with session.get(f"{instance.endpoint}/metrics", headers=headers) as r:
                line = next(x for x in (await r.text()).splitlines()
                            if x.startswith("llamacpp:tokens_predicted_total"))
            return int(float(line.split()[1]))

        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "max_tokens": total}
        async with aiohttp.ClientSession(read_bufsize=4096) as slow, \
                slow.post(f"{d.v1}/chat/completions", json=body) as resp:
            assert resp.status == 200
            await resp.content.readexactly(4096)  # ... and reads no more for now
            seen: list[int] = []

            async def held_back() -> bool:  # the runtime stopped: two looks a moment apart agree
                seen.append(await generated())
                return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

            await eventually(held_back, timeout=60, interval=0.3, what="the runtime held back")
            # Had the daemon kept reading, the whole answer would be made by now (here about a quarter is:
            # the kernel's socket buffers on the way); the relay waits on the client instead.
            assert seen[-1] < total * 3 // 4, f"{seen[-1]} of {total} tokens made while the client read 4 KiB"
            rest = 0
            async for chunk in resp.content.iter_any():  # the client reads on: nothing was lost
                rest += len(chunk)
            assert rest > 20 * 1024 * 1024
    assert await generated_total(d, logged) == total


async def generated_total(d: RunningDaemon, logged: int) -> int:
    """The tokens the access log's row after the first ``logged`` counts."""
    rows = await d.logged_requests(logged + 1)
    return rows[-1].completion_tokens or 0
