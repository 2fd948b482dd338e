"""The real llama-server (``make runtime``) serving the real Gemma 3 270M through the agent's proxy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.api.client import AgentClient
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import InstanceState
from agent.deps import build_deps
from agent.identity import server_ssl_context
from agent.server import create_app, start_server
from tests.agent._support import issue_tls, make_spec
from tests.fakes import FakeGpuProbe

pytestmark = pytest.mark.e2e


async def test_real_llama_server_answers_a_chat_through_the_proxy(
        tmp_path: Path, gemma_gguf: Path, port_base: int, real_llama_server: Path) -> None:
    home = tmp_path / "agent"
    tls = issue_tls(tmp_path, home / "identity")
    deps = build_deps(home, llama_server=real_llama_server, gpu_probe=FakeGpuProbe(), first_port=port_base)
    runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
    client = AgentClient(f"https://127.0.0.1:{port}", tls.client_context())
    try:
        spec = make_spec(gemma_gguf, "gemma", served_name="gemma-3-270m",
                         settings=LlamaCppSettings(ctx_size=1024, parallel=1, threads=2), startup_timeout_s=120)
        await client.start(spec)
        page = await client.instances()
        while not any(i.state in (InstanceState.READY, InstanceState.FAILED) for i in page.instances):
            page = await client.instances(since=page.version, timeout=60)
        info = await client.instance("gemma")
        assert info.state is InstanceState.READY, f"{info.error}\n" + "\n".join(info.last_log_lines)

        body = {"model": "gemma-3-270m", "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello."}]}
        async with client.session.post(client.proxy_url("gemma", "/v1/chat/completions"), json=body) as resp:
            assert resp.status == 200, await resp.text()
            answer = json.loads(await resp.text())
        assert answer["choices"][0]["message"]["content"].strip()
        assert answer["usage"]["completion_tokens"] > 0

        stopped = await client.stop("gemma", timeout=10)
        assert stopped.state is InstanceState.STOPPED
    finally:
        for instance_id in list(deps.manager.runs()):
            await deps.manager.stop(instance_id, timeout=2)
        await client.close()
        await runner.cleanup()
