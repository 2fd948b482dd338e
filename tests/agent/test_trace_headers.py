"""The agent's proxy passes the W3C trace headers on to the runtime, so a trace the daemon began
(daemon.tracing) reaches the runtime through a remote node's agent too."""

from __future__ import annotations

import json
from pathlib import Path

from agent.api.client import AgentClient
from agent.api.models import InstanceState
from tests.agent._support import make_spec
from tests.agent.test_agent_server import _until_state, start_agent  # noqa: F401 - start_agent is a fixture

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_the_proxy_passes_traceparent_and_tracestate_to_the_runtime(  # type: ignore[no-untyped-def]
        start_agent, fake_runtime, model_file, tmp_path: Path) -> None:  # noqa: F811
    seen_file = tmp_path / "headers.jsonl"
    agent = await start_agent(fake_runtime(tokens=3, headers_file=str(seen_file)))
    client: AgentClient = agent.client
    await client.start(make_spec(model_file, served_name="Tiny"))
    await _until_state(client, "m", InstanceState.READY)
    body = {"model": "Tiny", "messages": [{"role": "user", "content": "hi"}]}
    sent = {"traceparent": TRACEPARENT, "tracestate": "vendor=opaque"}
    async with client.session.post(client.proxy_url("m", "/v1/chat/completions"), json=body, headers=sent) as resp:
        assert resp.status == 200
        await resp.read()
    async with client.session.post(client.proxy_url("m", "/v1/chat/completions"), json=body) as resp:
        assert resp.status == 200
        await resp.read()
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()]
    chats = [(s["traceparent"], s["tracestate"]) for s in seen if s["path"] == "/v1/chat/completions"]
    assert chats == [(TRACEPARENT, "vendor=opaque"), (None, None)]
