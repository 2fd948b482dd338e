"""The Playground as people use it, at the view-model: the model's reasoning kept apart from its
answer, every chat saved in the daemon, the last answer regenerated in place, a message edited and
sent again, an image sent to a model that can see and refused (nothing sent, the reason said) for
one that cannot; every model a request can start is offered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from helpers import definition, playground_at, until

from app.viewmodels.playground import PlaygroundViewModel
from daemon.api.client import DaemonClient

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")


class Upstream:
    """``/v1/chat/completions`` answering each request with the next scripted list of deltas."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.answers: list[list[dict[str, str]]] = []
        self.hold: asyncio.Event | None = None  # set: the answer waits for it before its first piece

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        deltas = self.answers.pop(0) if self.answers else [{"content": "ok"}]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.hold is not None:
            await self.hold.wait()
        for delta in deltas:
            chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
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


@pytest.fixture
async def daemon(real_daemon: Any) -> AsyncIterator[DaemonClient]:
    """The app's client of the real daemon holding plain, eye (it can see) and manual (never started by
    a request), all stopped, and no saved chats."""
    real_daemon.hold_models(definition("plain", served_name="plain-7b"),
                            definition("eye", served_name="eye-4b", extra_args=["--mmproj", "/models/eye-mmproj.gguf"]),
                            definition("manual", start_on_request=False))

    async def forget(deps: Any) -> None:
        for chat in await deps.conversations.summaries():
            await deps.conversations.delete(chat.id)

    real_daemon.call(forget)
    client = DaemonClient(*real_daemon, client_name="app")
    yield client
    await client.close()


async def _answered(vm: PlaygroundViewModel, task: asyncio.Task[None] | None) -> None:
    assert task is not None
    await task
    await vm.saved()


async def test_every_model_a_request_can_start_is_offered_and_vision_ones_are_known(
        daemon: DaemonClient, upstream: tuple[Upstream, str]) -> None:
    vm = await playground_at(daemon, upstream[1])
    assert vm.state.value.models == ("plain-7b", "eye-4b")  # the stopped one loads on request; "manual" does not
    assert vm.state.value.vision_models == frozenset({"eye-4b"})
    await vm.close()


async def test_reasoning_is_kept_apart_and_the_chat_is_saved(daemon: DaemonClient,
                                                             upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    up.answers = [[{"reasoning_content": "The user greets; "}, {"reasoning_content": "greet back."},
                   {"content": "Hello!"}],
                  [{"content": "<think>Two and two"}, {"content": " is four.</think>\n\n"}, {"content": "**4**"}]]
    vm = await playground_at(daemon, url)
    await _answered(vm, vm.send("Hi"))
    answer = vm.state.value.messages[-1]
    assert (answer.content, answer.reasoning) == ("Hello!", "The user greets; greet back.")
    await _answered(vm, vm.send("2+2?"))
    answer = vm.state.value.messages[-1]
    assert (answer.content, answer.reasoning) == ("**4**", "Two and two is four.")
    assert up.bodies[1]["messages"][-2] == {"role": "assistant", "content": "Hello!"}  # no reasoning sent back

    saved = await daemon.get_conversation(vm.state.value.conversation_id or "")
    assert saved.title == "Hi" and saved.model == "plain-7b"
    assert [(m.role, m.content, m.reasoning) for m in saved.messages] == [
        ("user", "Hi", None), ("assistant", "Hello!", "The user greets; greet back."),
        ("user", "2+2?", None), ("assistant", "**4**", "Two and two is four.")]
    assert [c.id for c in vm.state.value.conversations] == [saved.id]
    await vm.close()


async def test_regenerate_replaces_the_last_answer_and_edit_replaces_what_followed(
        daemon: DaemonClient, upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    up.answers = [[{"content": "Paris."}], [{"content": "Berlin."}], [{"content": "Paris, France."}],
                  [{"content": "Rome."}]]
    vm = await playground_at(daemon, url)
    await _answered(vm, vm.send("Capital of France?"))
    await _answered(vm, vm.send("And Germany?"))
    await _answered(vm, vm.regenerate())
    assert [m.content for m in vm.state.value.messages] == [
        "Capital of France?", "Paris.", "And Germany?", "Paris, France."]
    assert up.bodies[2]["messages"][-1] == {"role": "user", "content": "And Germany?"}

    await _answered(vm, vm.edit(2, "And Italy?"))
    assert [m.content for m in vm.state.value.messages] == ["Capital of France?", "Paris.", "And Italy?", "Rome."]
    saved = await daemon.get_conversation(vm.state.value.conversation_id or "")
    assert [m.content for m in saved.messages] == ["Capital of France?", "Paris.", "And Italy?", "Rome."]
    await vm.close()


async def test_an_image_goes_to_a_model_that_sees_and_is_refused_for_one_that_cannot(
        daemon: DaemonClient, upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    up, url = upstream
    photo = tmp_path / "cat.png"
    photo.write_bytes(PNG)
    vm = await playground_at(daemon, url)
    assert vm.state.value.model == "plain-7b"
    assert not vm.attach_image(photo)
    assert "plain-7b cannot see images" in vm.state.value.notice and "vision projector" in vm.state.value.notice
    assert vm.state.value.images == ()

    vm.configure(model="eye-4b")
    assert vm.attach_image(photo)
    vm.configure(model="plain-7b")  # changed its mind after attaching: refused at send, nothing sent
    assert vm.send("What is this?") is None
    assert "cannot see images" in vm.state.value.notice and up.bodies == []
    assert vm.state.value.messages == ()

    vm.configure(model="eye-4b")
    await _answered(vm, vm.send("What is this?"))
    content = up.bodies[-1]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "What is this?"}
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert vm.state.value.images == () and vm.state.value.messages[0].images[0].name == "cat.png"
    saved = await daemon.get_conversation(vm.state.value.conversation_id or "")
    assert saved.messages[0].images == ["cat.png"]
    assert not vm.attach_image(tmp_path / "notes.txt")
    assert "not an image" in vm.state.value.notice
    await vm.close()


async def test_a_saved_chat_reopens_with_its_model_and_new_chat_starts_empty(
        daemon: DaemonClient, upstream: tuple[Upstream, str]) -> None:
    url = upstream[1]
    vm = await playground_at(daemon, url)
    await _answered(vm, vm.send("First chat"))
    first = vm.state.value.conversation_id
    vm.new_chat()
    assert vm.state.value.messages == () and vm.state.value.conversation_id is None
    vm.configure(model="eye-4b")
    await _answered(vm, vm.send("Second chat"))
    await until(lambda: len(vm.state.value.conversations) == 2)
    assert first is not None
    await vm.open_conversation(first)
    s = vm.state.value
    assert ([m.content for m in s.messages], s.model, s.conversation_id) == (["First chat", "ok"], "plain-7b", first)
    await _answered(vm, vm.send("More"))  # goes on in the reopened chat
    assert len((await daemon.get_conversation(first)).messages) == 4
    await vm.close()


async def test_a_new_chat_mid_answer_leaves_the_old_one_saved_and_the_new_one_empty(
        daemon: DaemonClient, upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    up.hold = asyncio.Event()
    vm = await playground_at(daemon, url)
    task = vm.send("Tell me a long story")
    await until(lambda: up.bodies)
    vm.new_chat()
    assert (vm.state.value.messages, vm.state.value.busy, vm.state.value.conversation_id) == ((), False, None)
    up.hold.set()
    await _answered(vm, task)
    assert vm.state.value.messages == () and vm.state.value.conversation_id is None  # the new chat is untouched
    (saved,) = await daemon.list_conversations()
    old = await daemon.get_conversation(saved.id)
    assert old.messages[0].content == "Tell me a long story" and len(old.messages) == 2
    await vm.close()
