"""The Playground streams a real SSE answer from an aiohttp server, piece by piece."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fake_daemon import FakeDaemonClient
from helpers import playground_at, until

from app.viewmodels.playground import PlaygroundViewModel
from daemon.api.models import ModelState

PIECES = ["Hel", "lo", " there", "!"]


class Upstream:
    """A /v1/chat/completions that streams PIECES, each released by the test."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.release = asyncio.Queue[str]()
        self.refuse: tuple[int, str] | None = None
        self.break_after_with: str | None = None  # after the first piece: the daemon's error event, then a cut

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.auth.append(request.headers.get("Authorization"))
        if self.refuse:
            status, message = self.refuse
            return web.json_response({"error": {"message": message, "type": "x", "code": "x"}}, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in PIECES:
            await self.release.get()
            chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.break_after_with:
                error = {"error": {"message": self.break_after_with, "type": "server_error", "code": "upstream_broken"}}
                await resp.write(f"data: {json.dumps(error)}\n\n".encode())
                assert request.transport is not None
                request.transport.close()  # no final chunk: the answer is not complete
                return resp
        usage = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                 "usage": {"completion_tokens": 4, "prompt_tokens": 9}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.chat)
    server = TestServer(app)
    await server.start_server()
    yield up, f"http://127.0.0.1:{server.port}/v1"
    await server.close()


async def playground(fake: FakeDaemonClient, api_url: str) -> PlaygroundViewModel:
    fake.set_state("beta", ModelState.READY)
    return await playground_at(fake, api_url)


async def test_answer_arrives_in_pieces_with_ttft_and_rate(fake: FakeDaemonClient, upstream) -> None:  # type: ignore[no-untyped-def]
    up, url = upstream
    vm = await playground(fake, url)
    assert vm.state.value.models == ("Beta-7B", "alpha") and vm.state.value.model == "Beta-7B", "ready first"
    vm.configure(system_prompt="Be brief.", temperature=0.2, max_tokens=64)
    task = vm.send("Say hello")
    seen: list[str] = []
    for n, piece in enumerate(PIECES, 1):
        up.release.put_nowait(piece)
        want = "".join(PIECES[:n])
        await until(lambda want=want: vm.state.value.messages[-1].content == want, what=f"piece {n}")
        seen.append(vm.state.value.messages[-1].content)
    assert seen == ["Hel", "Hello", "Hello there", "Hello there!"]
    await task
    answer = vm.state.value.messages[-1]
    assert not vm.state.value.busy and not answer.streaming and answer.error is None
    assert answer.stats is not None and answer.stats.tokens == 4 and answer.stats.ttft_ms is not None
    assert answer.stats.tokens_per_s is not None and "TTFT" in answer.stats.describe()
    body = up.bodies[0]
    assert body["stream"] is True and body["model"] == "Beta-7B" and body["max_tokens"] == 64
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "Say hello"}
    await vm.close()


async def test_stop_ends_the_answer_where_it_is(fake: FakeDaemonClient, upstream) -> None:  # type: ignore[no-untyped-def]
    up, url = upstream
    vm = await playground(fake, url)
    vm.send("Tell me a story")
    up.release.put_nowait("x")
    await until(lambda: vm.state.value.messages[-1].content == "Hel")
    vm.stop()
    await until(lambda: not vm.state.value.busy)
    answer = vm.state.value.messages[-1]
    assert answer.content == "Hel" and answer.stats and answer.stats.finish_reason == "stopped by you"
    await vm.close()


async def test_refusal_shows_the_openai_error_and_sends_the_key(fake: FakeDaemonClient, upstream) -> None:  # type: ignore[no-untyped-def]
    up, url = upstream
    up.refuse = (401, "invalid API key")
    vm = await playground(fake, url)
    vm.configure(api_key="sk-test")
    await vm.send("hi")  # type: ignore[misc]
    answer = vm.state.value.messages[-1]
    assert answer.error == "invalid API key (401)"
    assert up.auth == ["Bearer sk-test"]
    await vm.close()


async def test_a_model_stopped_mid_answer_shows_the_daemons_message_and_keeps_model_and_mode(
        fake: FakeDaemonClient, upstream) -> None:  # type: ignore[no-untyped-def]
    up, url = upstream
    up.break_after_with = "The model's runtime stopped in the middle of the answer."
    vm = await playground(fake, url)
    vm.configure(mode="chat")
    task = vm.send("Tell me a story")
    up.release.put_nowait("x")
    await task
    answer = vm.state.value.messages[-1]
    assert answer.content == "Hel" and answer.error == "The model's runtime stopped in the middle of the answer."
    assert "cannot reach" not in answer.error
    fake.set_state("beta", ModelState.STOPPED)  # the user stopped it
    await vm.fleet.resync()
    assert vm.fleet.snapshot.value.model("beta").status.state == ModelState.STOPPED  # type: ignore[union-attr]
    assert (vm.state.value.model, vm.state.value.mode) == ("Beta-7B", "chat"), "no silent switch"
    await vm.close()


async def test_the_playground_starts_from_the_models_preset() -> None:
    from fake_daemon import definition

    from daemon.api.models import Preset

    fake = FakeDaemonClient([definition("alpha"), definition("beta", served_name="Beta-7B", preset=Preset(
        system_prompt="You answer in French.", temperature=0.2, max_tokens=64))])
    fake.set_state("beta", ModelState.READY)
    vm = await playground_at(fake, "http://127.0.0.1:9/v1")
    s = vm.state.value
    assert (s.model, s.system_prompt, s.temperature, s.max_tokens) == ("Beta-7B", "You answer in French.", 0.2, 64)
    vm.configure(model="alpha")  # no preset: what was there stays
    assert vm.state.value.system_prompt == "You answer in French."
    vm.configure(model="Beta-7B", temperature=1.0)  # what the user sets wins over the preset
    s = vm.state.value
    assert (s.system_prompt, s.temperature, s.max_tokens) == ("You answer in French.", 1.0, 64)
