"""A base model (no chat template) gets text completion in the Playground, and the page says why.

Given a chat, such a model repeats the system prompt until ``max_tokens``; given a raw prompt on
``/v1/completions`` it continues the text, which is what it is for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fake_daemon import FakeDaemonClient, definition
from helpers import playground_at, until

from agent.api.llamacpp import LlamaCppSettings
from app.viewmodels.playground import (
    BASE_MODEL_REASON,
    CHAT,
    COMPLETION,
    PlaygroundViewModel,
)
from daemon.api.models import ModelState


class Upstream:
    """``/v1/completions`` and ``/v1/chat/completions``, each streaming two pieces."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        self.bodies.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in (" upon", " a time"):
            choice = ({"index": 0, "text": piece} if request.path.endswith("/v1/completions")
                      else {"index": 0, "delta": {"content": piece}})
            await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    app = web.Application()
    app.router.add_post("/v1/completions", up.answer)
    app.router.add_post("/v1/chat/completions", up.answer)
    server = TestServer(app)
    await server.start_server()
    yield up, f"http://127.0.0.1:{server.port}/v1"
    await server.close()


def _fleet_of_models() -> FakeDaemonClient:
    fake = FakeDaemonClient([definition("base", served_name="Base-270M", model_path="/models/base.gguf"),
                             definition("instruct", served_name="Instruct-7B", model_path="/models/instruct.gguf"),
                             definition("builtin", served_name="Builtin", model_path="/models/base.gguf",
                                        settings=LlamaCppSettings(chat_template="gemma"))])
    fake.base_model_files.add("/models/base.gguf")
    return fake


async def _playground(fake: FakeDaemonClient, api_url: str = "http://127.0.0.1:8484/v1") -> PlaygroundViewModel:
    for model_id in fake.definitions:
        fake.set_state(model_id, ModelState.READY)
    return await playground_at(fake, api_url)


async def test_a_base_model_gets_text_completion_and_its_reason() -> None:
    vm = await _playground(_fleet_of_models())
    assert vm.state.value.model == "Base-270M"
    await until(lambda: vm.state.value.mode == COMPLETION, what="completion mode for the base model")
    assert vm.state.value.base_model and vm.state.value.mode_reason == BASE_MODEL_REASON
    await vm.close()


async def test_a_model_with_a_template_in_its_file_chats_and_a_built_in_name_does_not_make_a_base_model_chat(
        ) -> None:
    fake = _fleet_of_models()
    vm = await _playground(fake)
    await until(lambda: vm.state.value.mode == COMPLETION)
    vm.configure(model="Instruct-7B")
    await until(lambda: len(fake.called("fit")) == 2 and not vm._lookups, what="the instruct model's file looked up")
    assert vm.state.value.mode == CHAT and not vm.state.value.base_model and vm.state.value.mode_reason == ""
    # The same base file with llama.cpp's built-in gemma template set (as the demo model has): still a
    # base model, which repeats a chat back; it opens in completion too.
    vm.configure(model="Builtin")
    await until(lambda: vm.state.value.mode == COMPLETION, what="completion for the base file")
    assert vm.state.value.base_model and vm.state.value.mode_reason == BASE_MODEL_REASON
    await vm.close()


async def test_the_user_may_switch_a_base_model_back_to_chat() -> None:
    vm = await _playground(_fleet_of_models())
    await until(lambda: vm.state.value.mode == COMPLETION)
    vm.configure(mode=CHAT)
    vm.configure(model="Instruct-7B")
    vm.configure(model="Base-270M")
    assert vm.state.value.mode == CHAT and vm.state.value.base_model  # the choice sticks; the reason stays
    await vm.close()


async def test_completion_mode_sends_the_raw_prompt_to_v1_completions(upstream) -> None:  # type: ignore[no-untyped-def]
    up, url = upstream
    vm = await _playground(_fleet_of_models(), url)
    await until(lambda: vm.state.value.mode == COMPLETION)
    await vm.send("Once")  # type: ignore[misc]
    assert up.paths == ["/v1/completions"]
    body = up.bodies[0]
    assert body["prompt"] == "Once" and "messages" not in body and body["stream"] is True
    answer = vm.state.value.messages[-1]
    assert answer.content == " upon a time" and answer.completion and answer.error is None
    vm.configure(mode=CHAT)
    await vm.send("Hello")  # type: ignore[misc]
    assert up.paths[-1] == "/v1/chat/completions"
    assert [m["content"] for m in up.bodies[-1]["messages"]][1:] == ["Hello"]  # the completion is not a turn
    await vm.close()


@pytest.mark.gui
def test_the_page_offers_completion_and_says_why(qloop: asyncio.AbstractEventLoop, qtbot: Any,
                                                 tmp_path: Path) -> None:
    from app.context import AppContext
    from app.ui.pages.playground import PlaygroundPage

    fake = _fleet_of_models()
    for model_id in fake.definitions:
        fake.set_state(model_id, ModelState.READY)
    ctx = AppContext.create(fake, tmp_path, prefs_path=tmp_path / "app.json", platform="linux",
                            host_refresh_s=3600)
    ctx.start()
    qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.loaded)
    page = PlaygroundPage(ctx)
    qtbot.addWidget(page)
    page.resize(1100, 700)
    page.show()
    qtbot.waitUntil(lambda: page.mode_reason.isVisible())
    assert page.mode_reason.text() == BASE_MODEL_REASON
    assert page.mode.currentText() == "Text completion" and page.send_button.text() == "Continue"
    assert not page.system.isEnabled()
    page.mode.setCurrentIndex(page.mode.findData(CHAT))  # the way back to chat
    assert ctx.playground.state.value.mode == CHAT and page.system.isEnabled()
    page.model.setCurrentText("Instruct-7B")
    qtbot.waitUntil(lambda: not page.mode_reason.isVisible())
    assert page.mode.currentText() == "Chat"
