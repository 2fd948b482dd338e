"""The Playground streams a real SSE answer through the real daemon from its model's runtime (its local
agent, the fake llama-server), piece by piece."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from helpers import definition, playground_at, until
from real_daemon import RealDaemon, daemon_in_thread

from app.viewmodels.playground import PlaygroundViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import DaemonSettings, ModelState, Preset
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes

BREAK_AFTER = 40  # the runtime cuts a stream after this many tokens (an answer of 4 is whole)
TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"  # the files chat: not base models


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """A real daemon with its local agent and the fake llama-server (a token every 50 ms, its requests'
    bodies in its log, streams cut after 40 tokens); alpha and beta (served Beta-7B) are tiny GGUFs."""
    root = tmp_path_factory.mktemp("playground")
    (root / "models").mkdir()
    runtime = write_fake_runtime(root / "runtime", token_delay_s=0.05, tokens=1000, break_after=BREAK_AFTER,
                                 log_bodies=True)
    with daemon_in_thread(root / "home", runtime) as found:
        for model_id, served_name in (("alpha", "alpha"), ("beta", "Beta-7B")):
            path = root / "models" / f"{model_id}.gguf"
            path.write_bytes(gguf_bytes(extra={"tokenizer.chat_template": TEMPLATE}))
            model = definition(model_id, served_name=served_name, model_path=str(path))
            found.call(lambda deps, model=model: deps.registry.add(model))
        yield found


@pytest.fixture
async def daemon(served: RealDaemon) -> AsyncIterator[DaemonClient]:
    """The app's client; beta ready, alpha stopped, no key required on loopback."""
    client = DaemonClient(*served, client_name="app")
    await client.put_settings(DaemonSettings(require_api_keys=False))
    if (await client.get_model("beta")).status.state != ModelState.READY:
        await client.start_model("beta", wait=True)
    yield client
    await client.close()


async def playground(daemon: DaemonClient, served: RealDaemon) -> PlaygroundViewModel:
    return await playground_at(daemon, f"{served[0]}/v1")


async def asked(client: DaemonClient, sent: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The request body beta's runtime logged that ``sent`` picks (read as the user reads a model's log,
    through the daemon)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        lines = [line async for line in client.logs("beta", tail=1000)]
        bodies = [json.loads(line.split("fake: body ", 1)[1]) for line in lines if "fake: body " in line]
        found = [body for body in bodies if sent(body)]
        if found:
            return found[-1]
        if loop.time() > deadline:
            raise AssertionError(f"beta's runtime was not sent that body; it logged {bodies}")
        await asyncio.sleep(0.05)  # the log line is written as the runtime reads the request


async def test_answer_arrives_in_pieces_with_ttft_and_rate(daemon: DaemonClient, served: RealDaemon) -> None:
    vm = await playground(daemon, served)
    assert vm.state.value.models == ("Beta-7B", "alpha") and vm.state.value.model == "Beta-7B", "ready first"
    vm.configure(system_prompt="Be brief.", temperature=0.2, max_tokens=4)
    seen: list[str] = []

    def note(state: Any) -> None:
        last = state.messages[-1] if state.messages else None
        if last is not None and last.role == "assistant" and last.content and (not seen or seen[-1] != last.content):
            seen.append(last.content)

    unsubscribe = vm.state.subscribe(note)
    task = vm.send("Say hello")
    assert task is not None
    await task
    unsubscribe()
    assert seen == ["Hello", "Hello from", "Hello from the", "Hello from the fake"]  # a token at a time
    answer = vm.state.value.messages[-1]
    assert not vm.state.value.busy and not answer.streaming and answer.error is None
    assert answer.stats is not None and answer.stats.tokens == 4 and answer.stats.ttft_ms is not None
    assert answer.stats.tokens_per_s is not None and "TTFT" in answer.stats.describe()
    body = await asked(daemon, lambda body: body.get("messages", [{}])[-1].get("content") == "Say hello")
    assert body["stream"] is True and body["model"] == "Beta-7B" and body["max_tokens"] == 4
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "Say hello"}
    await vm.close()


async def test_stop_ends_the_answer_where_it_is(daemon: DaemonClient, served: RealDaemon) -> None:
    vm = await playground(daemon, served)
    vm.send("Tell me a story")
    await until(lambda: vm.state.value.messages[-1].content.startswith("Hello"), timeout=30, what="the first piece")
    vm.stop()
    await until(lambda: not vm.state.value.busy)
    answer = vm.state.value.messages[-1]
    assert answer.content.startswith("Hello") and answer.error is None
    assert answer.stats and answer.stats.finish_reason == "stopped by you"
    assert len(answer.content.split()) < BREAK_AFTER  # ended where it was, before the runtime's own end
    await vm.close()


async def test_refusal_shows_the_openai_error_and_sends_the_key(daemon: DaemonClient, served: RealDaemon) -> None:
    await daemon.put_settings(DaemonSettings(require_api_keys=True))
    vm = await playground(daemon, served)
    vm.configure(api_key="sk-test", max_tokens=4)
    await vm.send("hi")  # type: ignore[misc]
    answer = vm.state.value.messages[-1]
    assert answer.error == "Invalid API key. (401)" and answer.content == ""  # the daemon's own message
    created = await daemon.create_key("playground")
    vm.configure(api_key=created.key)  # the key is what is sent: a real one is let through
    await vm.send("hi")  # type: ignore[misc]
    answer = vm.state.value.messages[-1]
    assert answer.error is None and answer.content == "Hello from the fake"
    await vm.close()


async def test_a_model_stopped_mid_answer_shows_the_daemons_message_and_keeps_model_and_mode(
        daemon: DaemonClient, served: RealDaemon) -> None:
    vm = await playground(daemon, served)  # the runtime cuts the stream after 40 tokens
    vm.configure(mode="chat")
    task = vm.send("Tell me a story")
    assert task is not None
    await task
    answer = vm.state.value.messages[-1]
    assert answer.content.startswith("Hello from the fake")
    assert answer.error == "The model's runtime stopped in the middle of the answer."
    await daemon.stop_model("beta")  # the user stopped it
    await vm.fleet.resync()
    assert vm.fleet.snapshot.value.model("beta").status.state == ModelState.STOPPED  # type: ignore[union-attr]
    assert (vm.state.value.model, vm.state.value.mode) == ("Beta-7B", "chat"), "no silent switch"
    await vm.close()


async def test_the_playground_starts_from_the_models_preset(daemon: DaemonClient, served: RealDaemon) -> None:
    saved = (await daemon.get_model("beta")).definition
    await daemon.update_model(saved.model_copy(update={"preset": Preset(
        system_prompt="You answer in French.", temperature=0.2, max_tokens=64)}))
    try:
        vm = await playground(daemon, served)
        s = vm.state.value
        assert (s.model, s.system_prompt, s.temperature, s.max_tokens) == ("Beta-7B", "You answer in French.", 0.2, 64)
        vm.configure(model="alpha")  # no preset: what was there stays
        assert vm.state.value.system_prompt == "You answer in French."
        vm.configure(model="Beta-7B", temperature=1.0)  # what the user sets wins over the preset
        s = vm.state.value
        assert (s.system_prompt, s.temperature, s.max_tokens) == ("You answer in French.", 1.0, 64)
        await vm.close()
    finally:
        await daemon.update_model(saved)
