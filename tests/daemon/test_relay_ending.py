"""A runtime that dies mid-answer, seen by a client of the /v1 router and by a client of the
agent's proxy: the same ending (an SSE error event, then a cut connection), recorded in both."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def _ending(session: aiohttp.ClientSession, url: str) -> tuple[list[dict], str | None]:
    """The SSE events a client got and how its stream ended (None: complete)."""
    events: list[dict] = []
    async with session.post(url, json=CHAT) as resp:
        assert resp.status == 200
        try:
            async for line in resp.content:
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    events.append(json.loads(line[6:]))
        except aiohttp.ClientPayloadError as exc:
            return events, type(exc).__name__
    return events, None


def _agent_client(d: RunningDaemon):  # type: ignore[no-untyped-def]
    links = getattr(d.daemon, "links", None) or d.daemon.orchestrator.links
    return links["local"].client


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not check():
        assert loop.time() < deadline, f"waited 10 s for {what}"
        await asyncio.sleep(0.05)


async def test_a_broken_stream_ends_alike_via_the_router_and_the_agents_proxy(tmp_path: Path,
                                                                           model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=8, break_after=2)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        async with aiohttp.ClientSession() as session:
            via_router = await _ending(session, f"{d.v1}/chat/completions")
        agent = _agent_client(d)
        via_agent = await _ending(agent.session, agent.proxy_url("m", "/v1/chat/completions"))

        for events, ended in (via_router, via_agent):
            assert ended == "ClientPayloadError"  # no final chunk: no client takes it for complete
            *answer, last = events
            assert last["error"]["code"] == "upstream_broken" and last["error"]["type"] == "server_error"
            assert [e["choices"][0]["delta"].get("content") for e in answer] == [None, "Hello", " from"]
        rows = await d.client.requests(limit=10)
        assert [(r.status, "broke after" in (r.error or "")) for r in rows] == [(502, True)]
        assert via_router[0][-1]["error"]["request_id"] == rows[0].id
        agent_log = d.daemon.paths.logs / "agent.log"
        await _until(lambda: "broke after" in agent_log.read_text(errors="replace"), "the agent to log the break")
