"""The /v1 router against a real daemon, its real agent child and the fake runtime."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import openai
import pytest

from daemon.api.models import ModelState
from tests.daemon.harness import model, running_daemon


async def _post(url: str, body: bytes | str, headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=sent) as r:
        return r.status, dict(r.headers), await r.json(content_type=None)


async def test_error_matrix(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("stopped-model", str(model_file), start_on_request=False))
        chat = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]})

        status, _, body = await _post(f"{d.v1}/chat/completions", chat)
        assert (status, body["error"]["code"]) == (404, "model_not_found")
        assert body["error"]["type"] == "invalid_request_error" and "no-such-model" in body["error"]["message"]

        status, headers, body = await _post(f"{d.v1}/chat/completions", chat.replace("no-such-model", "stopped-model"))
        assert (status, body["error"]["code"]) == (503, "model_not_ready")
        assert headers["Retry-After"] == "30" and "stopped" in body["error"]["message"]

        status, _, body = await _post(f"{d.v1}/chat/completions", "{not json")
        assert (status, body["error"]["code"]) == (400, "invalid_json")

        status, _, body = await _post(f"{d.v1}/chat/completions", json.dumps({"messages": []}))
        assert (status, body["error"]["code"]) == (400, "model_required")

        for field, value in (("n", 100000), ("max_tokens", 10**9), ("max_tokens", "lots"), ("logprobs", 10**6)):
            bad = json.dumps({"model": "stopped-model", "messages": [], field: value})
            status, _, body = await _post(f"{d.v1}/chat/completions", bad)
            assert (status, body["error"]["code"]) == (400, "invalid_value") and field in body["error"]["message"]

        status, _, body = await _post(f"{d.v1}/chat/completions", chat, headers={"Host": "evil.example"})
        assert (status, body["error"]["code"]) == (403, "host_not_allowed")
        status, _, body = await _post(f"{d.v1}/chat/completions", chat, headers={"Origin": "http://evil.example"})
        assert (status, body["error"]["code"]) == (403, "origin_not_allowed")
        for host in ("localhost:1234", "127.0.0.1", "[::1]:8484"):
            status, _, _ = await _post(f"{d.v1}/chat/completions", chat, headers={"Host": host})
            assert status == 404  # a loopback name passes the Host check and reaches the router
        status, _, _ = await _post(f"{d.v1}/chat/completions", chat, headers={"Origin": "http://localhost:3000"})
        assert status == 404


async def _answer_to_an_unfinished_body(port: int, head: bytes, body_bytes: int) -> tuple[int, dict]:
    """Send ``head`` and ``body_bytes`` of a body that never ends, and read the answer meanwhile.

    The body is never completed, so an answer proves the daemon stopped reading at its limit
    instead of buffering the whole body (a buffering server would never answer: the wait fails).
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        writer.write(head)
        piece = b"a" * (1024 * 1024)
        for _ in range(body_bytes // len(piece)):
            writer.write(piece if b"chunked" not in head else b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()

    sender = asyncio.ensure_future(send())
    try:
        status_line = await asyncio.wait_for(reader.readline(), 60)
        headers = {}
        while (line := await asyncio.wait_for(reader.readline(), 60)) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 60)
        return int(status_line.split()[1]), json.loads(body)
    finally:
        sender.cancel()
        writer.transport.abort()


async def test_body_over_64_mib_is_refused_without_buffering(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:  # refused before any routing
        port = d.daemon.config.port
        start = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        # A declared length over the limit is refused before any of the body is read...
        declared = start + b"Content-Length: %d\r\n\r\n" % (65 * 1024 * 1024)
        status, body = await _answer_to_an_unfinished_body(port, declared, 0)
        assert (status, body["error"]["code"]) == (413, "request_too_large")
        # ...and without one (chunked) the router stops reading at the limit: 70 of 80 MiB sent.
        chunked = start + b"Transfer-Encoding: chunked\r\n\r\n"
        status, body = await _answer_to_an_unfinished_body(port, chunked, 70 * 1024 * 1024)
        assert (status, body["error"]["code"]) == (413, "request_too_large")
        assert "64 MiB" in body["error"]["message"]
        assert d.daemon.router.stats == {}  # nothing was routed
        records = await d.client.requests()
        assert [r.status for r in records] == [413, 413]


async def test_start_on_request_starts_the_model_and_answers(tmp_path: Path, model_file: Path) -> None:
    from tests.fakes import write_fake_runtime

    starts = tmp_path / "starts.txt"
    slow = write_fake_runtime(tmp_path / "bin", load_seconds=1.0, tokens=4, starts_file=str(starts))
    async with running_daemon(tmp_path / "home", slow) as d:
        await d.client.create_model(model("lazy", str(model_file), start_on_request=True))
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        answers = await asyncio.gather(*[
            client.chat.completions.create(model="lazy", messages=[{"role": "user", "content": "hi"}])
            for _ in range(3)])
        assert all(a.choices[0].message.content for a in answers)
        status = (await d.client.get_model("lazy")).status
        assert status.state == ModelState.READY
        assert len(starts.read_text().splitlines()) == 1  # three waiting requests, one runtime start
        records = await d.client.requests()
        assert len([r for r in records if r.model == "lazy"]) == 3
        assert all(r.status == 200 and r.queue_ms > 500 for r in records)  # each waited for the load
        await client.close()


async def test_api_keys_required(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime, require_api_keys=True) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        created = await d.client.create_key("editor")
        assert created.key.startswith("sk-mirbad-")
        stored = (tmp_path / "home" / "keys.json").read_text()
        assert created.key not in stored  # only the hash is kept

        chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        status, _, body = await _post(f"{d.v1}/chat/completions", chat)  # no key at all
        assert (status, body["error"]["code"]) == (401, "invalid_api_key")
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="sk-mirbad-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.code == "invalid_api_key"
        await client.close()

        status, _, body = await _post(f"{d.v1}/chat/completions", chat, headers={"x-api-key": created.key})
        assert status == 200 and body["choices"]
        client = openai.AsyncOpenAI(base_url=d.v1, api_key=created.key, max_retries=0)
        answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        assert [m.id for m in (await client.models.list()).data] == ["m"]
        await d.client.revoke_key(created.info.id)
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await client.close()


async def test_stream_is_relayed_chunk_by_chunk(tmp_path: Path, model_file: Path) -> None:
    from tests.fakes import write_fake_runtime

    runtime = write_fake_runtime(tmp_path / "bin", token_delay_s=0.2, tokens=6)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        status = await d.client.start_model("m", wait=True)
        assert status.state == ModelState.READY
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        pieces = []
        busy_while_streaming = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                if busy_while_streaming is None:
                    # The first token reached us while the runtime is still generating: not buffered.
                    busy_while_streaming = await _slots_busy(d, "m")
        assert len(pieces) >= 6
        assert busy_while_streaming == 1
        assert stream.response.headers["X-Accel-Buffering"] == "no"
        await client.close()


async def _slots_busy(d, model_id: str) -> int:
    inst = d.daemon.orchestrator.instance(d.daemon.registry.require(model_id))
    auth = {"Authorization": f"Bearer {inst.api_key}"}
    async with aiohttp.ClientSession() as session, session.get(f"{inst.endpoint}/slots", headers=auth) as r:
        return sum(1 for slot in await r.json() if slot.get("is_processing"))


async def test_client_disconnect_frees_the_slot(tmp_path: Path, model_file: Path) -> None:
    from tests.fakes import write_fake_runtime

    runtime = write_fake_runtime(tmp_path / "bin", token_delay_s=0.2, tokens=200)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while await _slots_busy(d, "m") != 0:  # the agent's own check generation after a start
            assert loop.time() < deadline
            await asyncio.sleep(0.02)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with aiohttp.ClientSession() as session, session.post(f"{d.v1}/chat/completions", json=body) as r:
            await r.content.readline()
            assert await _slots_busy(d, "m") == 1
        # leaving the block closes the connection mid-stream
        deadline = loop.time() + 1.0
        while await _slots_busy(d, "m") != 0:
            assert loop.time() < deadline, "the runtime slot was still busy 1 s after the client left"
            await asyncio.sleep(0.02)
        deadline = loop.time() + 10.0
        while not (records := await d.client.requests()):  # written as the cancelled handler ends
            assert loop.time() < deadline, "the aborted request left no access-log row"
            await asyncio.sleep(0.02)
        assert [r.status for r in records] == [499]  # the client left mid-answer: not a 200


async def test_request_id_metrics_and_models_list(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        async with aiohttp.ClientSession() as session:
            body = {"model": "M", "messages": [{"role": "user", "content": "hi"}]}  # names are case-insensitive
            async with session.post(f"{d.v1}/chat/completions", json=body, headers={"X-Request-Id": "abc-123"}) as r:
                assert r.status == 200 and r.headers["X-Request-Id"] == "abc-123"
            async with session.post(f"{d.v1}/chat/completions", json=body, headers={"X-Request-Id": "bad id <script>"}) as r:
                assert r.status == 200 and len(r.headers["X-Request-Id"]) == 32
            async with session.get(f"{d.v1}/models") as r:
                listed = await r.json()
            assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["m"]
            async with session.get(f"{d.url}/metrics") as r:
                text = await r.text()
            assert 'mirbadllm_router_requests_total{model="m",status="200"} 2.0' in text
            assert 'mirbadllm_model_ready{model="m"} 1.0' in text
            async with session.options(f"{d.v1}/chat/completions", headers={"Origin": "http://evil.example"}) as r:
                assert "Access-Control-Allow-Origin" not in r.headers
        records = sorted(await d.client.requests(), key=lambda r: r.ts)
        assert [(r.path, r.status) for r in records] == [
            ("/v1/chat/completions", 200), ("/v1/chat/completions", 200), ("/v1/models", 200),
            ("/v1/chat/completions", 403)]  # every /v1 request leaves a row, refused ones too
        assert records[0].id == "abc-123" and records[1].id != "abc-123"
        assert all(r.completion_tokens for r in records[:2])


async def test_a_pooled_connection_the_runtime_closed_is_not_a_502(tmp_path: Path, model_file: Path) -> None:
    """llama-server drops idle keep-alive connections; reusing one as it closes must not fail."""
    from tests.fakes import write_fake_runtime

    runtime = write_fake_runtime(tmp_path / "bin", drop_reused=True)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        for _ in range(3):
            status, _, answer = await _post(f"{d.v1}/chat/completions", body)
            assert status == 200, answer  # each reuse is hung up on; the router retries once, fresh
