"""A model's logs through the daemon: ``GET /api/models/{id}/logs?follow=1`` keeps streaming."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from daemon.api.models import ModelState
from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_runtime


async def test_following_a_model_log_streams_what_the_runtime_writes_after_it_opened(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=2, log_requests=True)
    async with running_daemon(tmp_path / "home", runtime) as d, aiohttp.ClientSession() as http:
        await d.client.create_model(model("m", str(model_file)))
        assert (await d.client.start_model("m", wait=True)).state == ModelState.READY
        lines = d.client.logs("m", tail=1, follow=True)
        # The newest line written before the stream opened comes first: the stream is open.
        first = await asyncio.wait_for(anext(lines), 20)
        assert "processing task" not in first
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        async with http.post(f"{d.v1}/chat/completions", json=body) as resp:
            assert resp.status == 200

        async def the_request_line() -> str:
            async for line in lines:
                if "processing task" in line:
                    return line
            raise AssertionError("the log stream ended instead of following")

        line = await asyncio.wait_for(the_request_line(), 20)
        assert line.startswith("slot launch_slot_: id  0 | task ")
        await lines.aclose()
