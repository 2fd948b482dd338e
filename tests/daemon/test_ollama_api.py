"""The Ollama API with the real ``ollama`` client from PyPI against a real daemon, its agent child and
the fake runtime: every call a tool that speaks only Ollama makes, behind /v1's keys and access log."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import aiohttp
import ollama
import pytest

from daemon.api.models import DaemonSettings
from daemon.listener import lan_hosts
from tests.daemon.harness import model, running_daemon
from tests.fakes.ports import free_port_block

ANSWER = "Hello from the fake llama server. It"  # the fake runtime's 8 tokens


def _client(port: int, key: str | None = None) -> ollama.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return ollama.AsyncClient(host=f"http://127.0.0.1:{port}", headers=headers, trust_env=False)


async def test_an_ollama_client_lists_shows_chats_generates_and_embeds(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    port = free_port_block(1)
    async with running_daemon(tmp_path / "home", fake_runtime, ollama_port=port) as d:
        assert d.daemon.listener.ollama_port == port
        await d.client.create_model(model("chat-model", str(model_file), served_name="tiny:270m"))
        await d.client.create_model(model("embedder", str(model_file), settings={"embeddings": True}))
        client = _client(port)

        listed = {m.model: m for m in (await client.list()).models}
        assert set(listed) == {"tiny:270m", "embedder"}
        tiny = listed["tiny:270m"]
        assert tiny.size == model_file.stat().st_size and tiny.modified_at is not None and tiny.digest
        assert tiny.details is not None and (tiny.details.format, tiny.details.family) == ("gguf", "llama")
        assert tiny.details.parameter_size  # counted from the header's tensors

        shown = await client.show("tiny:270m")
        assert shown.details is not None and shown.details.family == "llama"
        assert shown.modelinfo is not None and shown.modelinfo["llama.context_length"] == 2048
        assert shown.capabilities == ["completion", "tools"]
        assert (await client.show("embedder:latest")).capabilities == ["embedding"]  # name:latest is the name

        whole = await client.chat("tiny:270m", messages=[{"role": "user", "content": "hi"}], stream=False)
        assert whole.message.role == "assistant" and whole.message.content == ANSWER
        assert whole.done and whole.done_reason == "length" and whole.eval_count == 8
        assert whole.prompt_eval_count == 1 and whole.total_duration and whole.total_duration > 0

        parts = [p async for p in await client.chat("tiny:270m", messages=[{"role": "user", "content": "hi there"}],
                                                      stream=True, options={"num_predict": 3, "temperature": 0.2})]
        assert "".join(p.message.content or "" for p in parts) == "Hello from the"
        assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
        last = parts[-1]
        assert (last.done_reason, last.eval_count, last.prompt_eval_count) == ("stop", 3, 2)
        for counter in ("total_duration", "load_duration", "eval_duration"):
            assert isinstance(getattr(last, counter), int), counter

        generated = await client.generate("tiny:270m", prompt="Why?", system="Be brief.", stream=False)
        assert generated.response == ANSWER and generated.done and generated.eval_count == 8
        streamed = [p async for p in await client.generate("tiny:270m", prompt="Why?", stream=True)]
        assert "".join(p.response or "" for p in streamed) == ANSWER and streamed[-1].done

        embedded = await client.embed("embedder:latest", input=["a cat", "a dog"])
        assert len(embedded.embeddings) == 2 and len(embedded.embeddings[0]) == 8
        assert embedded.embeddings[0] != embedded.embeddings[1]
        assert len((await client.embeddings("embedder", prompt="a cat")).embedding) == 8

        loaded = {m.model: m for m in (await client.ps()).models}
        assert set(loaded) == {"tiny:270m", "embedder"}  # both were started on request
        assert loaded["tiny:270m"].size and loaded["tiny:270m"].expires_at is not None

        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/api/version") as r:
            assert r.status == 200 and (await r.json())["version"]

        with pytest.raises(ollama.ResponseError) as missing:
            await client.chat("no-such-model", messages=[{"role": "user", "content": "hi"}])
        assert (missing.value.status_code, missing.value.error) == (404, "model 'no-such-model' not found")
        with pytest.raises(ollama.ResponseError) as missing:
            await client.show("no-such-model:latest")
        assert (missing.value.status_code, missing.value.error) == (404, "model 'no-such-model:latest' not found")

        # One access-log row per call (version is a probe, as /healthz is), as the /v1 call it became.
        rows = await d.logged_requests(12)
        assert sorted((r.path, r.status) for r in rows) == sorted(
            [("/v1/models", 200)] * 2 + [("/v1/models/tiny:270m", 200), ("/v1/models/embedder", 200)]
            + [("/v1/chat/completions", 200)] * 4 + [("/v1/embeddings", 200)] * 2
            + [("/v1/chat/completions", 404), ("/v1/models/no-such-model:latest", 404)])
        chats = [r for r in rows if r.path == "/v1/chat/completions" and r.status == 200]
        assert all(r.model == "chat-model" and r.completion_tokens for r in chats)
        await client._client.aclose()


async def _post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session, \
            session.post(f"http://127.0.0.1:{port}{path}", data=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def test_keys_the_host_check_and_bad_bodies_as_on_v1(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    port = free_port_block(1)
    async with running_daemon(tmp_path / "home", fake_runtime, ollama_port=port, require_api_keys=True) as d:
        await d.client.create_model(model("chat-model", str(model_file), served_name="tiny"))
        key = (await d.client.create_key("ollama-tool")).key
        without, wrong, keyed = _client(port), _client(port, "not-a-key"), _client(port, key)

        for client in (without, wrong):
            with pytest.raises(ollama.ResponseError) as refused:
                await client.list()
            assert refused.value.status_code == 401
            with pytest.raises(ollama.ResponseError) as refused:
                await client.chat("tiny", messages=[{"role": "user", "content": "hi"}], stream=False)
            assert refused.value.status_code == 401 and "API key" in refused.value.error
        with pytest.raises(ollama.ResponseError) as refused:  # no key: not even whether a model exists
            await without.show("no-such-model")
        assert refused.value.status_code == 401

        assert [m.model for m in (await keyed.list()).models] == ["tiny"]
        answer = await keyed.chat("tiny:latest", messages=[{"role": "user", "content": "hi"}], stream=False)
        assert answer.message.content == ANSWER

        rows = await d.logged_requests(7)
        assert sorted((r.status, r.key_id is not None) for r in rows) == [(200, True)] * 2 + [(401, False)] * 5

        auth = {"Authorization": f"Bearer {key}"}
        chat = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": false}'
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/api/chat", data=chat, headers={**auth, "X-Request-Id": "ollama-call-1"}) as r:
            assert r.status == 200 and r.headers["X-Request-Id"] == "ollama-call-1"
        row = await d.client.request("ollama-call-1")  # the caller's id finds the call's access-log row
        assert (row.path, row.model, row.status, row.completion_tokens) == ("/v1/chat/completions", "chat-model", 200, 8)

        await d.client.create_model(model("stopped-model", str(model_file), start_on_request=False))
        with pytest.raises(ollama.ResponseError) as refused:  # /v1's refusal, its status and reason
            await keyed.chat("stopped-model", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 503 and "is stopped" in refused.value.error
        for body, words in ((b"{not json", "not valid JSON"), (b"[1]", "JSON object"),
                            (b'{"messages": []}', "model is required"),
                            (b'{"model": "tiny", "messages": "hi"}', "messages must be a list"),
                            (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "format": "xml"}',
                             "format must be"),
                            ((b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], '
                             b'"options": {"temperature": "hot"}}'), "options.temperature must be a number"),
                            (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi", "images": ["%%%"]}]}',
                             "is not base64")):
            status, error = await _post(port, "/api/chat", body, auth)
            assert status == 400 and words in error["error"], (body, error)

        status, error = await _post(port, "/api/chat", b"{}", {**auth, "Host": "evil.example"})
        assert status == 403 and "Host header not allowed" in error["error"]
        status, error = await _post(port, "/api/chat", b"{}", {**auth, "Origin": "http://evil.example"})
        assert status == 403 and "Cross-origin" in error["error"]
        status, error = await _post(port, "/api/pull", b"{}", auth)
        assert status == 404 and "/api/chat" in error["error"]  # says what this port answers
        for client in (without, wrong, keyed):
            await client._client.aclose()


async def test_a_taken_port_leaves_the_ollama_api_off_and_v1_serving(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="daemon.listener")
    with socket.socket() as taken:  # Ollama itself, say
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with running_daemon(tmp_path / "home", None, ollama_port=port, local_agent=False) as d:
            assert d.daemon.listener.ollama_port is None
            said = [r.getMessage() for r in caplog.records if "Ollama API" in r.getMessage()]
            assert len(said) == 1 and said[0].startswith(f"Ollama API off: cannot listen on 127.0.0.1:{port}")
            assert "ollama_port" in said[0]  # and what to do about it
            async with aiohttp.ClientSession() as session, session.get(f"{d.v1}/models") as r:
                assert r.status == 200 and (await r.json())["data"] == []


async def test_opened_to_the_lan_the_ollama_api_moves_with_v1_and_wants_a_key(tmp_path: Path) -> None:
    port = free_port_block(1)
    async with running_daemon(tmp_path / "home", None, ollama_port=port, local_agent=False) as d:
        async with _client(port) as local:
            assert (await local.list()).models == []  # on loopback: no key needed
        key = (await d.client.create_key("tablet")).key
        await d.client.put_settings(DaemonSettings(lan_access=True))
        assert d.daemon.listener.ollama_port == port
        hosts = ["127.0.0.1", *lan_hosts()[:1]]  # every interface now, this machine's LAN address too
        for host in hosts:
            keyless = ollama.AsyncClient(host=f"http://{host}:{port}", trust_env=False)
            with pytest.raises(ollama.ResponseError) as refused:
                await keyless.list()
            assert refused.value.status_code == 401  # beyond loopback, /v1's keys are required
            keyed = ollama.AsyncClient(host=f"http://{host}:{port}", headers={"Authorization": f"Bearer {key}"},
                                       trust_env=False)
            assert (await keyed.list()).models == []
            for client in (keyless, keyed):
                await client._client.aclose()
