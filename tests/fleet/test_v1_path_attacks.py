"""A /v1 path with dot segments, sent as bytes on the wire: the router relays a request's path to
the model's node through its agent's proxy route with the daemon's own certificate, and an HTTP
client folds ``..`` away, so ``/v1/../../../unpair`` would reach the agent's daemon-only routes.
The router refuses such a path (400) before anything is sent; the node stays paired."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from daemon.api.models import ModelState
from tests.daemon.harness import model, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.inprocess import start_inprocess_agent


async def _raw(port: int, method: str, path: str, body: bytes) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    data = await reader.read()
    writer.close()
    head, _, rest = data.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split()[1]), rest


async def test_dot_segments_in_a_v1_path_never_reach_the_agent(tmp_path: Path, runtime_exe: Path,
                                                               model_file: Path) -> None:
    agent = await start_inprocess_agent(tmp_path / "agent", name="box", llama_server=runtime_exe)
    try:
        async with running_daemon(tmp_path / "daemon", None, local_agent=False) as rd:
            pairing = agent.last("pairing")
            node = await rd.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", pairing["code"],
                                             pairing["fingerprint"])
            link = rd.daemon.links.get(node.id)
            assert link is not None
            await eventually(lambda: link.online, what="the node online")
            await rd.client.create_model(model("m", str(model_file), node=node.id))
            await rd.client.start_model("m")
            await rd.wait_state("m", ModelState.READY)
            body = json.dumps({"model": "m"}).encode()
            port = rd.daemon.config.port
            for path in ("/v1/../../../unpair", "/v1/%2e%2e/%2e%2e/%2e%2e/unpair", "/v1/chat/./../../../../unpair",
                         "/v1/..%2f..%2f..%2funpair", "/v1/../../../instances"):
                status, answer = await _raw(port, "POST", path, body)
                assert status == 400 and "invalid_path" in answer, (path, status, answer[:300])
            assert link.online and agent.lifecycle.port
            models = await rd.client.list_models()
            assert [m.definition.id for m in models] == ["m"]
            status, answer = await _raw(port, "POST", "/v1/chat/completions", json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())
            assert status == 200, answer[:300]  # the node still answers: nothing was unpaired
    finally:
        await agent.close()
