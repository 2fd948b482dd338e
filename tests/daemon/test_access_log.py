"""The /v1 access log: one row per request (refusals too), per-key usage, failure reasons, retries."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web
from multidict import CIMultiDict

from daemon.api.models import RequestRecord
from daemon.config import DaemonConfig
from daemon.deps import build_deps
from daemon.history import History
from daemon.paths import DaemonPaths
from daemon.server import _middlewares
from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.serving import serving

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def _call(method: str, url: str, *, body: bytes | None = None, key: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, CIMultiDict[str], bytes]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    async with aiohttp.ClientSession() as session, session.request(method, url, data=body, headers=sent) as r:
        return r.status, CIMultiDict(r.headers), await r.read()


async def test_every_v1_request_leaves_one_row_with_its_key(tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=5, usage_when_asked=True)
    async with running_daemon(tmp_path / "home", runtime, require_api_keys=True, max_body_bytes=4096) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.create_model(model("idle", str(model_file), start_on_request=False))
        await d.client.start_model("m", wait=True)
        key = (await d.client.create_key("editor")).key
        key_id = (await d.client.list_keys())[0].id
        chat = json.dumps(CHAT).encode()
        expected: list[tuple[int, str | None]] = []

        async def expect(status: int, key_used: str | None, method: str, path: str, **kwargs: object) -> bytes:
            got, _, answer = await _call(method, f"{d.v1}{path}", **kwargs)  # type: ignore[arg-type]
            assert got == status, answer
            expected.append((status, key_used))
            return answer

        await expect(401, None, "POST", "/chat/completions", body=chat)
        await expect(401, None, "POST", "/chat/completions", body=chat, key="sk-mirbad-wrong")
        await expect(401, None, "GET", "/models")
        await expect(400, key_id, "POST", "/chat/completions", body=b"{not json", key=key)
        await expect(404, key_id, "POST", "/chat/completions", body=chat.replace(b'"m"', b'"nope"'), key=key)
        await expect(413, key_id, "POST", "/chat/completions", body=b'{"pad": "' + b"a" * 8192 + b'"}', key=key)
        await expect(503, key_id, "POST", "/chat/completions", body=chat.replace(b'"m"', b'"idle"'), key=key)
        await expect(200, key_id, "GET", "/models", key=key)
        await expect(200, key_id, "GET", "/models/m", key=key)
        await expect(404, key_id, "GET", "/models/nope", key=key)
        await expect(200, key_id, "POST", "/chat/completions", body=chat, key=key)  # 1 + 5 tokens
        streamed = await expect(200, key_id, "POST", "/chat/completions", key=key,
                                body=json.dumps({**CHAT, "stream": True}).encode())

        rows = await d.logged_requests(len(expected))
        assert [(r.status, r.key_id) for r in rows] == expected
        assert all(r.error for r in rows if r.status >= 400)  # every refusal says why
        assert "invalid_api_key" in rows[0].error and "model_not_found" in rows[4].error
        assert "request_too_large" in rows[5].error and "model_not_ready" in rows[6].error
        assert rows[-1].completion_tokens == 5 and rows[-1].prompt_tokens == 1  # a stream counts its tokens

        # The client did not ask for usage, so it gets no usage-only chunk (the runtime sent one).
        events = [json.loads(line[5:]) for line in streamed.decode().splitlines()
                  if line.startswith("data: {")]
        assert events and all(e["choices"] for e in events)
        assert streamed.decode().rstrip().endswith("data: [DONE]")

        info = (await d.client.list_keys())[0]
        assert (info.requests_24h, info.requests_total) == (9, 9)
        assert info.tokens_24h == info.tokens_total == 12  # two answers of 1 prompt + 5 completion tokens


async def test_a_stream_longer_than_the_usage_tail_still_counts_its_tokens(tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=600, usage_when_asked=True)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        status, _, streamed = await _call("POST", f"{d.v1}/chat/completions",
                                          body=json.dumps({**CHAT, "stream": True}).encode())
        assert status == 200 and len(streamed) > 4 * 16384  # many chunks past the 16 KiB the router keeps
        events = [json.loads(line[5:]) for line in streamed.decode().splitlines() if line.startswith("data: {")]
        assert len(events) >= 600 and all(e["choices"] for e in events)  # the usage-only chunk was dropped
        (row,) = await d.logged_requests(1)
        assert (row.status, row.prompt_tokens, row.completion_tokens) == (200, 1, 600)


async def test_loopback_without_a_key_is_logged_keyless_and_usage_asked_for_is_kept(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=3, usage_when_asked=True)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        key = (await d.client.create_key("script")).key
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        chunks = [c async for c in await client.chat.completions.create(
            model="m", messages=CHAT["messages"], stream=True, stream_options={"include_usage": True})]
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3  # asked for: kept
        await client.close()
        status, _, _ = await _call("POST", f"{d.v1}/chat/completions", body=json.dumps(CHAT).encode(), key=key)
        assert status == 200  # a key sent when none is required still counts for that key
        rows = await d.logged_requests(2)
        assert [(r.status, r.key_id is None, r.completion_tokens) for r in rows] == [(200, True, 3), (200, False, 3)]
        assert (await d.client.list_keys())[0].requests_total == 1


async def test_models_retrieve_with_the_openai_client(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.create_model(model("lazy", str(model_file), served_name="Lazy", start_on_request=True))
        await d.client.create_model(model("off", str(model_file), start_on_request=False))
        await d.client.start_model("m", wait=True)
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        listed = {m.id: m for m in (await client.models.list()).data}
        assert set(listed) == {"m", "Lazy"}
        for name, served in (("m", "m"), ("lazy", "Lazy")):
            got = await client.models.retrieve(name)
            assert got == listed[served]  # the same object as its entry in the list
        for name in ("nope", "off"):
            with pytest.raises(openai.NotFoundError) as caught:
                await client.models.retrieve(name)
            assert caught.value.code == "model_not_found" and name in caught.value.message
        await client.close()


async def test_connection_failures_are_retried_fresh_and_their_reasons_recorded(
        tmp_path: Path, model_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="daemon.router.router")
    runtime = write_fake_runtime(tmp_path / "bin", reset_first=2)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        status, _, answer = await _call("POST", f"{d.v1}/chat/completions", body=json.dumps(CHAT).encode())
        assert status == 200, answer  # two connections reset before any answer, the third answers
        [row] = await d.logged_requests(1)
        assert row.status == 200 and row.completion_tokens
        assert "attempt 1: " in row.error and "attempt 2: " in row.error and "attempt 3" not in row.error
        assert "Error" in row.error  # the exception's class
        logged = [r.getMessage() for r in caplog.records if r.name == "daemon.router.router"]
        assert len(logged) == 2 and all(row.id in line and "failed before any answer" in line for line in logged)
        instance = d.daemon.orchestrator.instance(d.daemon.registry.require("m"))
        assert instance.api_key and instance.api_key not in row.error + "".join(logged)


async def test_a_runtime_that_keeps_resetting_answers_502_with_the_reasons(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", reset_first=1000)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        status, headers, answer = await _call("POST", f"{d.v1}/chat/completions", body=json.dumps(CHAT).encode())
        error = json.loads(answer)["error"]
        assert (status, error["code"]) == (502, "upstream_unreachable")
        assert error["request_id"] == headers["X-Request-Id"]
        [row] = await d.logged_requests(1)
        assert row.status == 502 and [f"attempt {n}: " in row.error for n in (1, 2, 3)] == [True] * 3


async def test_a_handler_that_raises_answers_in_the_api_shape(tmp_path: Path) -> None:
    daemon = build_deps(DaemonConfig.model_validate({"port": 0, "local_agent": False}), DaemonPaths(tmp_path))
    daemon.admin_token = "admin-secret"
    await daemon.history.open()

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("kaboom in a handler")

    app = web.Application(middlewares=_middlewares(daemon))
    app.add_routes([web.get("/api/boom", boom), web.post("/v1/boom", boom)])
    try:
        async with serving(app, handler_cancellation=True) as url:
            for method, path in (("GET", "/api/boom"), ("POST", "/v1/boom")):
                status, headers, body = await _call(method, f"{url}{path}",
                                                    headers={"Authorization": "Bearer admin-secret",
                                                             "X-Request-Id": f"req-{method}"})
                assert status == 500 and headers["Content-Type"].startswith("application/json"), body
                error = json.loads(body)["error"]
                assert (error["type"], error["code"]) == ("server_error", "internal_error")
                assert error["request_id"] == headers["X-Request-Id"] == f"req-{method}"
                assert f"req-{method}" in error["message"] and "kaboom" not in error["message"]
            [row] = await daemon.history.recent_requests(10)
            assert (row.path, row.status, row.error) == ("/v1/boom", 500, "RuntimeError: kaboom in a handler")
    finally:
        await daemon.history.close()


async def test_an_older_access_log_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE requests (id TEXT, ts REAL, model TEXT, node TEXT, path TEXT, status INTEGER,"
               " queue_ms REAL, ttft_ms REAL, total_ms REAL, prompt_tokens INTEGER, completion_tokens INTEGER)")
    db.execute("INSERT INTO requests VALUES ('old', 1e9, 'm', 'local', '/v1/chat/completions', 200,"
               " 1, 2, 3, 4, 5)")
    db.commit()
    db.close()
    history = History(path)
    await history.open()
    history.record_request(RequestRecord(id="new", ts=2e9, model=None, node=None, path="/v1/models", status=401,
                                         key_id="k1", error="invalid_api_key: Invalid API key."))
    rows = await history.recent_requests(10)
    await history.close()
    assert [(r.id, r.completion_tokens, r.key_id, r.error) for r in rows] == [
        ("new", None, "k1", "invalid_api_key: Invalid API key."), ("old", 5, None, None)]
    again = History(path)  # opening a migrated file again changes nothing
    await again.open()
    assert len(await again.recent_requests(10)) == 2
    await again.close()
