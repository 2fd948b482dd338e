"""The real llama-server serving the real Gemma 3 270M GGUF through the daemon and its agent,
driven by the official ``openai`` client. One daemon for the module: loading is the slow part."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest
import pytest_asyncio

from daemon.api.models import ModelState
from daemon.models.registry import DEMO_MODEL_ID
from tests.daemon.harness import RunningDaemon, model, running_daemon

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory, real_llama_server: Path) -> AsyncIterator[RunningDaemon]:
    """A daemon on a fresh home: it seeds the demo model and auto-starts it with llama-server."""
    home = tmp_path_factory.mktemp("e2e") / "home"
    policy = {"backoff_s": [0.1, 1.0, 2.0], "probe_interval_s": 3600}  # a killed llama-server is restarted at once
    async with running_daemon(home, None, seed_demo_model=True, health=policy) as d:
        status = await d.wait_state(DEMO_MODEL_ID, ModelState.READY, ModelState.FAILED, timeout=240)
        assert status.state == ModelState.READY, status.error
        yield d


@pytest.fixture
def client(demo: RunningDaemon) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=demo.v1, api_key="unused", max_retries=0)


async def test_models_chat_and_completions(demo: RunningDaemon, client: openai.AsyncOpenAI) -> None:
    listed = await client.models.list()
    assert [m.id for m in listed.data] == [DEMO_MODEL_ID]
    chat = await client.chat.completions.create(
        model=DEMO_MODEL_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, temperature=0)
    assert chat.choices[0].message.content.strip()
    assert chat.usage.completion_tokens > 0
    completion = await client.completions.create(model=DEMO_MODEL_ID, prompt="The capital of France is",
                                                 max_tokens=8, temperature=0)
    assert completion.choices[0].text.strip()


async def test_streamed_chat_arrives_in_pieces(demo: RunningDaemon, client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=DEMO_MODEL_ID, messages=[{"role": "user", "content": "Count from one to twenty in words."}],
        max_tokens=48, temperature=0, stream=True, stream_options={"include_usage": True})
    pieces: list[str] = []
    busy_at_first_piece = None
    usage = None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            if busy_at_first_piece is None:
                busy_at_first_piece = await _slots_busy(demo)
    assert len(pieces) > 5 and "".join(pieces).strip()
    assert busy_at_first_piece == 1  # the first piece reached us while llama-server was still generating
    assert usage is not None and usage.completion_tokens > 5
    records = await demo.client.requests(limit=1)
    assert records[0].ttft_ms is not None and records[0].completion_tokens == usage.completion_tokens


async def _slots_busy(d: RunningDaemon, model_id: str = DEMO_MODEL_ID) -> int:
    inst = d.daemon.orchestrator.instance(d.daemon.registry.require(model_id))
    auth = {"Authorization": f"Bearer {inst.api_key}"}
    async with aiohttp.ClientSession() as session, session.get(f"{inst.endpoint}/slots", headers=auth) as r:
        return sum(1 for slot in await r.json() if slot.get("is_processing"))


async def test_client_disconnect_frees_the_llama_slot_long_before_the_answer_would_end(demo: RunningDaemon) -> None:
    """2000 tokens take Gemma a minute or more here; a client that goes away after the first piece
    frees its slot at once (seconds under a loaded parallel suite), not after the whole answer."""
    body = {"model": DEMO_MODEL_ID, "messages": [{"role": "user", "content": "Write a very long story."}],
            "max_tokens": 2000, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{demo.v1}/chat/completions", json=body) as response,
    ):
        assert response.status == 200
        await response.content.readline()
        assert await _slots_busy(demo) == 1
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while await _slots_busy(demo) != 0:
        assert loop.time() < deadline, "llama-server still generated 5 s after the client went away"
        await asyncio.sleep(0.02)


async def test_embeddings_from_a_second_model(demo: RunningDaemon, client: openai.AsyncOpenAI) -> None:
    gguf = demo.daemon.registry.require(DEMO_MODEL_ID).model_path
    await demo.client.create_model(model("gemma-embed", gguf, settings={"embeddings": True, "ctx_size": 2048,
                                                                        "pooling": "mean"}))
    status = await demo.client.start_model("gemma-embed", wait=True)
    assert status.state == ModelState.READY, status.error
    result = await client.embeddings.create(model="gemma-embed", input=["hello world", "goodbye"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 640
    assert result.data[0].embedding != result.data[1].embedding
    await demo.client.stop_model("gemma-embed")


async def test_agent_restart_adopts_the_running_llama_server(demo: RunningDaemon, client: openai.AsyncOpenAI) -> None:
    before = (await demo.client.get_model(DEMO_MODEL_ID)).status
    agent = demo.daemon.local_agent
    assert agent is not None and agent.process is not None
    old_agent_pid = agent.process.pid
    os.kill(old_agent_pid, signal.SIGKILL)  # the agent dies; its runtime must not
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while agent.process is None or agent.process.pid == old_agent_pid or not demo.daemon.links["local"].online:
        assert loop.time() < deadline, "the local agent was not restarted"
        await asyncio.sleep(0.05)
    after = await demo.wait_state(DEMO_MODEL_ID, ModelState.READY, timeout=60)
    assert after.pid == before.pid  # adopted, not restarted
    chat = await client.chat.completions.create(
        model=DEMO_MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert chat.choices[0].message.content is not None


async def test_a_killed_llama_server_is_restarted(demo: RunningDaemon, client: openai.AsyncOpenAI) -> None:
    before = (await demo.client.get_model(DEMO_MODEL_ID)).status
    since = (await demo.client.status()).last_event_id
    os.kill(before.pid, signal.SIGKILL)
    crashed = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while not crashed:
        assert loop.time() < deadline, "no crash event for the killed llama-server"
        page = await demo.client.events(since, timeout=5)
        since = page.last_id
        crashed = any(e.type == "model.crashed" and e.model == DEMO_MODEL_ID for e in page.events)
    after = await demo.wait_state(DEMO_MODEL_ID, ModelState.READY, timeout=120)
    assert after.pid != before.pid and after.crash_count == 1
    chat = await client.chat.completions.create(
        model=DEMO_MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert chat.choices[0].message.content is not None


async def test_a_stopped_model_starts_on_the_first_request(demo: RunningDaemon, client: openai.AsyncOpenAI) -> None:
    await demo.client.stop_model(DEMO_MODEL_ID)
    assert (await demo.client.get_model(DEMO_MODEL_ID)).status.state == ModelState.STOPPED
    chat = await client.chat.completions.create(
        model=DEMO_MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert chat.choices[0].message.content is not None
    assert (await demo.client.get_model(DEMO_MODEL_ID)).status.state == ModelState.READY
    records = await demo.client.requests(limit=1)
    assert records[0].status == 200 and records[0].queue_ms > 0  # it waited for the load
