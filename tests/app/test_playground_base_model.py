"""A base model (no chat template) gets text completion in the Playground, and the page says why.

Given a chat, such a model repeats the system prompt until ``max_tokens``; given a raw prompt on
``/v1/completions`` it continues the text, which is what it is for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import definition, playground_at, until
from real_daemon import RealDaemon, daemon_in_thread

from agent.api.llamacpp import LlamaCppSettings
from app.viewmodels.playground import (
    BASE_MODEL_REASON,
    CHAT,
    COMPLETION,
    PlaygroundViewModel,
)
from daemon.api.client import DaemonClient
from daemon.api.models import LOCAL_NODE
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """A real daemon with its local agent and the fake llama-server (each request's body in the model's
    log): base (a GGUF without a chat template, served Base-270M), instruct (one with its own template)
    and builtin (the base file with llama.cpp's built-in gemma template set), all stopped."""
    root = tmp_path_factory.mktemp("base-model")
    (root / "models").mkdir()
    base, instruct = root / "models" / "base.gguf", root / "models" / "instruct.gguf"
    base.write_bytes(gguf_bytes(name="base"))
    instruct.write_bytes(gguf_bytes(name="instruct", extra={"tokenizer.chat_template": TEMPLATE}))
    runtime = write_fake_runtime(root / "runtime", tokens=3, log_bodies=True)
    with daemon_in_thread(root / "home", runtime) as found:
        found.root = root  # type: ignore[attr-defined]
        for model in (definition("base", served_name="Base-270M", model_path=str(base)),
                      definition("instruct", served_name="Instruct-7B", model_path=str(instruct)),
                      definition("builtin", served_name="Builtin", model_path=str(base),
                                 settings=LlamaCppSettings(chat_template="gemma"))):
            found.call(lambda deps, model=model: deps.registry.add(model))
        yield found


@pytest.fixture
async def daemon(served: RealDaemon) -> AsyncIterator[DaemonClient]:
    client = DaemonClient(*served, client_name="app")
    yield client
    await client.close()


async def _playground(daemon: DaemonClient, served: RealDaemon) -> PlaygroundViewModel:
    return await playground_at(daemon, f"{served[0]}/v1")


def _known(vm: PlaygroundViewModel, served: RealDaemon, name: str) -> bool:
    """Whether the Playground has read the header of ``name`` (a file of ``models/``) from its node."""
    return (LOCAL_NODE, str(served.root / "models" / name)) in vm._templates and not vm._lookups  # type: ignore[attr-defined]


async def _paths(daemon: DaemonClient, count: int) -> list[str]:
    """The paths of the Playground's requests to base in the daemon's access log, oldest first, once it
    holds ``count`` (a row is written as its answer ends)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        rows = await daemon.requests(model="base")
        if len(rows) >= count or loop.time() > deadline:
            return [row.path for row in sorted(rows, key=lambda r: r.ts)]
        await asyncio.sleep(0.05)  # the log is written in batches


async def _asked(daemon: DaemonClient, sent: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The request body base's runtime logged (read from its log through the daemon) that ``sent`` picks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        lines = [line async for line in daemon.logs("base", tail=1000)]
        bodies = [json.loads(line.split("fake: body ", 1)[1]) for line in lines if "fake: body " in line]
        found = [body for body in bodies if sent(body)]
        if found:
            return found[-1]
        if loop.time() > deadline:
            raise AssertionError(f"base's runtime was not sent that body; it logged {bodies}")
        await asyncio.sleep(0.05)  # its line is written as it reads the request


async def test_a_base_model_gets_text_completion_and_its_reason(daemon: DaemonClient, served: RealDaemon) -> None:
    vm = await _playground(daemon, served)
    assert vm.state.value.model == "Base-270M"
    await until(lambda: vm.state.value.mode == COMPLETION, timeout=10, what="completion mode for the base model")
    assert vm.state.value.base_model and vm.state.value.mode_reason == BASE_MODEL_REASON
    await vm.close()


async def test_a_model_with_a_template_in_its_file_chats_and_a_built_in_name_does_not_make_a_base_model_chat(
        daemon: DaemonClient, served: RealDaemon) -> None:
    vm = await _playground(daemon, served)
    await until(lambda: vm.state.value.mode == COMPLETION, timeout=10)
    vm.configure(model="Instruct-7B")
    await until(lambda: _known(vm, served, "instruct.gguf"), timeout=10, what="the instruct model's file looked up")
    assert vm.state.value.mode == CHAT and not vm.state.value.base_model and vm.state.value.mode_reason == ""
    # The same base file with llama.cpp's built-in gemma template set (as the demo model has): still a
    # base model, which repeats a chat back; it opens in completion too.
    vm.configure(model="Builtin")
    await until(lambda: vm.state.value.mode == COMPLETION, timeout=10, what="completion for the base file")
    assert vm.state.value.base_model and vm.state.value.mode_reason == BASE_MODEL_REASON
    await vm.close()


async def test_the_user_may_switch_a_base_model_back_to_chat(daemon: DaemonClient, served: RealDaemon) -> None:
    vm = await _playground(daemon, served)
    await until(lambda: vm.state.value.mode == COMPLETION, timeout=10)
    vm.configure(mode=CHAT)
    vm.configure(model="Instruct-7B")
    vm.configure(model="Base-270M")
    assert vm.state.value.mode == CHAT and vm.state.value.base_model  # the choice sticks; the reason stays
    await vm.close()


async def test_completion_mode_sends_the_raw_prompt_to_v1_completions(daemon: DaemonClient,
                                                                      served: RealDaemon) -> None:
    await daemon.start_model("base", wait=True)
    try:
        vm = await _playground(daemon, served)
        await until(lambda: vm.state.value.mode == COMPLETION, timeout=10)
        before = len(await _paths(daemon, 0))
        await vm.send("Once")  # type: ignore[misc]
        answer = vm.state.value.messages[-1]
        assert answer.content == "Hello from the" and answer.completion and answer.error is None  # its 3 tokens
        assert (await _paths(daemon, before + 1))[before:] == ["/v1/completions"]
        body = await _asked(daemon, lambda body: body.get("prompt") == "Once")
        assert "messages" not in body and body["stream"] is True
        vm.configure(mode=CHAT)
        await vm.send("Hello")  # type: ignore[misc]
        assert (await _paths(daemon, before + 2))[before:] == ["/v1/completions", "/v1/chat/completions"]
        body = await _asked(daemon, lambda body: "messages" in body and body["messages"][-1]["content"] == "Hello")
        assert [m["content"] for m in body["messages"]][1:] == ["Hello"]  # the completion is not a turn
        await vm.close()
    finally:
        await daemon.stop_model("base")


@pytest.mark.gui
def test_the_page_offers_completion_and_says_why(served: RealDaemon, qloop: asyncio.AbstractEventLoop, qtbot: Any,
                                                 tmp_path: Path) -> None:
    from app.context import AppContext
    from app.ui.pages.playground import PlaygroundPage

    ctx = AppContext.create(DaemonClient(*served, client_name="app"), tmp_path, prefs_path=tmp_path / "app.json",
                            platform="linux", host_refresh_s=3600)
    ctx.fleet.feed._poll_timeout = 5
    ctx.start()
    try:
        qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.loaded)
        page = PlaygroundPage(ctx)
        qtbot.addWidget(page)
        page.resize(1100, 700)
        page.show()
        qtbot.waitUntil(lambda: page.mode_reason.isVisible(), timeout=10_000)
        assert page.mode_reason.text() == BASE_MODEL_REASON
        assert page.mode.currentText() == "Text completion" and page.send_button.text() == "Continue"
        assert not page.system.isEnabled()
        page.mode.setCurrentIndex(page.mode.findData(CHAT))  # the way back to chat
        assert ctx.playground.state.value.mode == CHAT and page.system.isEnabled()
        page.model.setCurrentText("Instruct-7B")
        qtbot.waitUntil(lambda: not page.mode_reason.isVisible(), timeout=10_000)
        assert page.mode.currentText() == "Chat"
    finally:
        closing = asyncio.ensure_future(ctx.close())
        qtbot.waitUntil(closing.done, timeout=10_000)
        ctx.first_run.close()
