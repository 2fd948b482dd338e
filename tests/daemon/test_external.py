"""External endpoints as models and fallbacks, against a fake OpenAI server on real HTTP.

The fake records what reached it (path, ``Authorization``, ``model``, the daemon's own key header)
so a test can see the model name rewritten and the key read from its file on each request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web

from daemon.api.client import DaemonError
from daemon.api.models import ModelDefinition, ModelState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes.ports import free_port_block
from tests.fakes.serving import serving

KEY_ONE = "sk-provider-first-7f3a9c"
KEY_TWO = "sk-provider-second-41d2e8"


@dataclass
class Seen:
    path: str
    authorization: str | None
    model: str | None
    x_api_key: str | None


@dataclass
class FakeOpenAi:
    url: str
    seen: list[Seen] = field(default_factory=list)

    def chats(self) -> list[Seen]:
        return [s for s in self.seen if s.path.endswith("/chat/completions")]


@asynccontextmanager
async def fake_openai() -> AsyncIterator[FakeOpenAi]:
    """An OpenAI-compatible server: ``/v1/models`` and ``/v1/chat/completions`` (JSON or SSE)."""
    fake = FakeOpenAi("")

    async def models(request: web.Request) -> web.Response:
        fake.seen.append(Seen(request.path, request.headers.get("Authorization"), None,
                              request.headers.get("x-api-key")))
        return web.json_response({"object": "list", "data": [{"id": "gpt-fake", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        fake.seen.append(Seen(request.path, request.headers.get("Authorization"), body.get("model"),
                              request.headers.get("x-api-key")))
        answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body.get("model"),
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "from the provider"},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}
        if not body.get("stream"):
            return web.json_response(answer)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in ("from ", "the ", "provider"):
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": body.get("model"),
                     "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    async with serving(app) as url:
        fake.url = f"{url}/v1"
        yield fake


def external(model_id: str, base_url: str, key_file: Path | None, **fields: object) -> ModelDefinition:
    return ModelDefinition.model_validate({"id": model_id, "served_name": model_id, "runtime": "external",
                                           "base_url": base_url, "provider_model": "gpt-fake",
                                           "api_key_file": str(key_file) if key_file else None, **fields})


async def _chat(d: RunningDaemon, name: str) -> tuple[int, dict[str, object]]:
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session, session.post(f"{d.v1}/chat/completions", json=body,
                                                               headers={"x-api-key": "sk-mirbad-local"}) as r:
        return r.status, await r.json()


async def test_external_model_rewrites_the_name_and_reads_the_key_per_request(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key_file = tmp_path / "provider.key"
    key_file.write_text(KEY_ONE + "\n")
    async with fake_openai() as fake, running_daemon(tmp_path / "home", None) as d:
        view = await d.client.create_model(external("ext", fake.url, key_file))
        assert view.definition.node == "local" and view.definition.api_key_file == str(key_file)
        status = await d.wait_state("ext", ModelState.READY, ModelState.FAILED, timeout=20)
        assert status.state == ModelState.READY, status.error
        assert fake.seen[0].path == "/v1/models" and fake.seen[0].authorization == f"Bearer {KEY_ONE}"

        client = openai.AsyncOpenAI(base_url=d.v1, api_key="sk-mirbad-client", max_retries=0)
        first = await client.chat.completions.create(model="ext", messages=[{"role": "user", "content": "hi"}])
        assert first.choices[0].message.content == "from the provider"
        assert first.model == "gpt-fake"  # the provider's answer passes through as it is
        key_file.write_text(KEY_TWO)  # rotated in the file: the next request sends the new key
        stream = await client.chat.completions.create(model="ext", stream=True,
                                                      messages=[{"role": "user", "content": "hi"}])
        words = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
        assert "".join(words) == "from the provider"
        status_code, _ = await _chat(d, "ext")
        assert status_code == 200

        chats = fake.chats()
        assert [c.model for c in chats] == ["gpt-fake"] * 3
        assert [c.authorization for c in chats] == [f"Bearer {KEY_ONE}", f"Bearer {KEY_TWO}", f"Bearer {KEY_TWO}"]
        assert all(c.x_api_key is None for c in chats)  # the daemon's own key header stays here

        rows = await d.logged_requests(3)
        assert [(r.model, r.node, r.status, r.answered_by) for r in rows] == [("ext", None, 200, None)] * 3
        assert rows[0].prompt_tokens == 3 and rows[0].completion_tokens == 4

        # The key is nowhere: not in the admin API's views, the logs, models.json or the access log.
        listing = json.dumps([v.model_dump(mode="json") for v in await d.client.list_models()])
        single = (await d.client.get_model("ext")).model_dump_json()
        stored = (tmp_path / "home" / "models.json").read_text()
        await d.daemon.history.flush()
        with sqlite3.connect(tmp_path / "home" / "history.sqlite") as db:
            history = repr(db.execute("SELECT * FROM requests").fetchall())
        for text in (listing, single, stored, history, caplog.text):
            assert KEY_ONE not in text and KEY_TWO not in text
        assert str(key_file) in single

        # A key file that cannot be read: 503 naming the path, never any content.
        key_file.unlink()
        status_code, error = await _chat(d, "ext")
        assert status_code == 503
        problem = error["error"]
        assert isinstance(problem, dict) and problem["code"] == "api_key_unreadable"
        assert str(key_file) in str(problem["message"]) and "sk-" not in str(problem["message"])
        refused = (await d.logged_requests(4))[-1]  # an endpoint's refusal names no node either
        assert (refused.model, refused.node, refused.status) == ("ext", None, 503)


async def test_fallbacks_answer_when_the_model_cannot(tmp_path: Path, fake_runtime: Path,
                                                      model_file: Path) -> None:
    key_file = tmp_path / "provider.key"
    key_file.write_text(KEY_ONE)
    closed = f"http://127.0.0.1:{free_port_block(1)}/v1"  # nothing listens there
    async with fake_openai() as fake, running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(external("ext", fake.url, key_file))
        # Stopped and not loadable: the fallback answers, with its own name in `model`.
        await d.client.create_model(model("primary", str(model_file), fallbacks=["ext"], start_on_request=False))
        status_code, answer = await _chat(d, "primary")
        assert status_code == 200, answer
        assert answer["model"] == "gpt-fake" and fake.chats()[-1].model == "gpt-fake"
        # An external endpoint that cannot be reached falls back too (here: by served name).
        await d.client.create_model(external("down", closed, key_file, fallbacks=["ext"]))
        status_code, answer = await _chat(d, "down")
        assert status_code == 200, answer
        # No fallback: the model's own refusal.
        await d.client.create_model(model("alone", str(model_file), start_on_request=False))
        status_code, answer = await _chat(d, "alone")
        assert status_code == 503

        rows = await d.logged_requests(3)
        by_model = {r.model: r for r in rows}
        assert by_model["primary"].answered_by == "ext" and by_model["primary"].status == 200
        assert by_model["primary"].error is not None
        assert "'primary' did not answer: model_not_ready" in by_model["primary"].error
        assert "answered by the fallback 'ext'" in by_model["primary"].error
        assert by_model["down"].answered_by == "ext" and "cannot be reached" in (by_model["down"].error or "")
        assert by_model["alone"].answered_by is None and by_model["alone"].status == 503

        # The primary's node goes offline: a model that would load on request falls back.
        await d.client.create_model(model("loads", str(model_file), start_on_request=True, fallbacks=["ext"]))
        agent = d.daemon.local_agent
        assert agent is not None and agent.process is not None
        agent.process.kill()  # the node is gone at once (a graceful stop waits out the link's long-poll)...
        await agent.stop()  # ...and the daemon does not bring it back
        link = d.daemon.links.get("local")
        assert link is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while link.online and loop.time() < deadline:
            await asyncio.sleep(0.05)
        assert not link.online
        before = len(fake.chats())
        status_code, answer = await _chat(d, "loads")
        assert status_code == 200, answer
        assert len(fake.chats()) == before + 1
        row = next(r for r in await d.logged_requests(4) if r.model == "loads")
        assert row.answered_by == "ext" and "offline" in (row.error or "")


async def test_fallback_cycles_and_bad_endpoints_are_refused_on_save(tmp_path: Path, model_file: Path) -> None:
    key_file = tmp_path / "provider.key"
    key_file.write_text(KEY_ONE)
    async with running_daemon(tmp_path / "home", None) as d:
        await d.client.create_model(model("a", str(model_file)))
        await d.client.create_model(model("b", str(model_file), fallbacks=["a"]))
        await d.client.create_model(model("c", str(model_file), fallbacks=["b"]))

        async def refused(definition: ModelDefinition, *, update: bool = False) -> str:
            with pytest.raises(DaemonError) as caught:
                await (d.client.update_model(definition) if update else d.client.create_model(definition))
            assert caught.value.status == 422, caught.value
            return caught.value.message

        assert "a cycle (a -> c -> b -> a)" in await refused(model("a", str(model_file), fallbacks=["c"]),
                                                             update=True)
        assert "this model itself" in await refused(model("a", str(model_file), fallbacks=["A"]), update=True)
        assert "no model is named 'nope'" in await refused(model("d", str(model_file), fallbacks=["nope"]))
        assert "base_url" in await refused(external("e", "ftp://host/v1", key_file))
        assert "base_url" in await refused(external("e", "https:///v1", key_file))
        assert "no credentials" in await refused(external("e", "https://user:pw@host/v1", key_file))
        assert "not a readable file" in await refused(external("e", "https://host/v1", tmp_path / "missing"))
        assert "only for runtime 'external'" in await refused(model("e", str(model_file), base_url="https://h/v1"))
        assert (await d.client.get_model("a")).definition.fallbacks == []


def test_a_fallback_gets_its_own_name_and_no_adapter_of_the_model() -> None:
    from daemon.router.router import _for_fallback

    adapters = [{"name": "tuned", "file": "/models/tuned.gguf"}]
    primary = model("primary", adapters=adapters)
    plain, other = model("plain"), model("other", adapters=[{"name": "b1", "file": "/models/b1.gguf"},
                                                              {"name": "b2", "file": "/models/b2.gguf"}])
    body = json.dumps({"model": "tuned", "lora": [{"id": 0, "scale": 1.0}], "n": 1}).encode()
    assert json.loads(_for_fallback(body, primary, plain)) == {"model": "plain", "n": 1}
    assert json.loads(_for_fallback(body, primary, other)) == {
        "model": "other", "n": 1, "lora": [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]}
    client_lora = json.dumps({"model": "plain", "lora": [{"id": 3, "scale": 0.5}]}).encode()
    assert json.loads(_for_fallback(client_lora, plain, other))["lora"] == [{"id": 3, "scale": 0.5}]
