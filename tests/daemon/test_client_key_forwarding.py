"""The key a client sends the daemon, and its cookies, reach no runtime: an ``x-api-key`` (the
Anthropic-style header) is checked here and dropped like ``Authorization``."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_runtime


async def test_the_clients_key_and_cookies_stay_in_the_daemon(tmp_path: Path, model_file: Path) -> None:
    seen = tmp_path / "headers.jsonl"
    fake = write_fake_runtime(tmp_path / "bin", tokens=2, headers_file=str(seen))
    async with running_daemon(tmp_path / "home", fake, require_api_keys=True) as d:
        created = await d.client.create_key("editor")
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{d.v1}/chat/completions", json=body,
                                    headers={"x-api-key": created.key, "Cookie": "session=abc"}) as resp:
                assert resp.status == 200, await resp.text()
            async with session.post(f"{d.v1}/chat/completions", json=body,
                                    headers={"x-api-key": "sk-wrong"}) as refused:
                assert refused.status == 401
    requests = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [r for r in requests if r["path"] == "/v1/chat/completions"]
    assert [r for r in requests if "x-api-key" in r or "Cookie" in r] == []
    assert created.key not in seen.read_text()
