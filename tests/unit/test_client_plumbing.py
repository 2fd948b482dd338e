"""The HTTP plumbing ``AgentClient`` and ``DaemonClient`` share (``core.http``): each client's
errors keep their own type and shape, long-polls and event streams read the same way."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agent.api.client import AgentClient, AgentError
from core.http import ErrorMap, JsonHttp, error_envelope
from daemon.api.client import DaemonClient, DaemonError


class _Server:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], str | None]] = []  # path, query, Authorization
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        self.url = ""

    async def start(self) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, dict(request.query), request.headers.get("Authorization")))
        if request.path == "/agent/v1/status":
            return web.json_response({"error": {"code": "busy", "message": "try later", "details": {"n": 1}}},
                                     status=409)
        if request.path == "/api/status":
            return web.json_response({"error": {"message": "no such thing", "type": "invalid_request_error"}},
                                     status=404)
        if request.path == "/api/settings":
            return web.Response(text="<html>proxy error</html>", status=502)
        if request.path == "/api/events":
            return web.json_response({"boot_id": "b", "last_id": 7, "events": []})
        if request.path in ("/api/models/alpha/logs", "/raw"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b": comment\n\ndata: " + json.dumps("first line").encode() + b"\n\n")
            if request.path == "/raw":
                await resp.write(b"data: {\"a\":\r\ndata:1}\n\n")
            else:
                await resp.write(b"event: log\ndata: \"second line\"\n\n")
            await resp.write_eof()
            return resp
        return web.json_response({"error": {"code": "not_found", "message": request.path}}, status=404)


@pytest.fixture
async def server() -> AsyncIterator[_Server]:
    s = _Server()
    await s.start()
    yield s
    await s.runner.cleanup()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_each_client_turns_an_error_answer_into_its_own_error(server: _Server) -> None:
    agent = AgentClient(server.url, None)
    with pytest.raises(AgentError) as agent_err:
        await agent.status()
    assert (agent_err.value.status, agent_err.value.code, agent_err.value.message) == (409, "busy", "try later")
    assert agent_err.value.details == {"n": 1}
    await agent.close()

    daemon = DaemonClient(server.url, "tok")
    with pytest.raises(DaemonError) as daemon_err:
        await daemon.status()
    assert (daemon_err.value.status, daemon_err.value.code) == (404, "invalid_request_error"), \
        "an OpenAI-shaped error without a code is named by its type"
    with pytest.raises(DaemonError) as not_json:
        await daemon.get_settings()
    assert (not_json.value.status, not_json.value.code, not_json.value.message) == (
        502, "error", "<html>proxy error</html>")
    await daemon.close()
    assert [auth for path, _q, auth in server.seen if path.startswith("/api/")] == ["Bearer tok", "Bearer tok"]
    assert [auth for path, _q, auth in server.seen if path.startswith("/agent/")] == [None]


async def test_an_unreachable_server_is_status_0_in_each_clients_words() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    agent = AgentClient(url, None)
    with pytest.raises(AgentError) as agent_err:
        await agent.instance("x")
    assert (agent_err.value.status, agent_err.value.code) == (0, "unreachable")
    assert agent_err.value.message.startswith(f"{url}: ")
    await agent.close()
    daemon = DaemonClient(url, "tok")
    with pytest.raises(DaemonError) as daemon_err:
        await daemon.list_models()
    assert (daemon_err.value.status, daemon_err.value.code) == (0, "unreachable")
    assert daemon_err.value.message.startswith(f"cannot reach the daemon at {url}: ")
    assert await daemon.healthz() is False
    await daemon.close()


async def test_a_long_poll_sends_since_and_its_wait(server: _Server) -> None:
    daemon = DaemonClient(server.url, "tok")
    page = await daemon.events(since=3, timeout=0.5)
    assert page.last_id == 7
    assert server.seen[-1][:2] == ("/api/events", {"since": "3", "timeout": "0.5"})
    await daemon.close()

    http = JsonHttp(server.url, _plain_errors())
    assert (await http.poll("/api/events", None, 5))["last_id"] == 7
    assert server.seen[-1][:2] == ("/api/events", {}), "no since: the current state, no wait"
    await http.close()


async def test_an_event_stream_yields_one_payload_per_event(server: _Server) -> None:
    daemon = DaemonClient(server.url, "tok")
    lines = [line async for line in daemon.logs("alpha", tail=5)]
    assert lines == ["first line", "second line"]
    assert server.seen[-1] == ("/api/models/alpha/logs", {"tail": "5", "follow": "0"}, "Bearer tok")
    await daemon.close()

    http = JsonHttp(server.url, _plain_errors())
    raw = [data async for data in http.sse("/raw")]
    assert raw == ['"first line"', '{"a":\n1}'], "a multi-line event is its data lines joined by newlines"
    await http.close()


async def test_a_session_given_to_a_client_is_not_closed_by_it(server: _Server) -> None:
    async with aiohttp.ClientSession() as shared:
        agent = AgentClient(server.url, None, session=shared)
        assert agent.session is shared and agent.ssl is False
        assert agent.proxy_url("m1", "/v1/models") == f"{server.url}/agent/v1/proxy/m1/v1/models"
        await agent.close()
        assert not shared.closed
    own = AgentClient(server.url, None)
    session = own.session
    await own.close()
    assert session.closed


def test_error_envelope_reads_only_an_error_object() -> None:
    assert error_envelope('{"error": {"code": "x"}}') == {"code": "x"}
    for text in ("", "not json", "[]", '{"error": "flat"}', '{"detail": 1}'):
        assert error_envelope(text) is None, text


def _plain_errors() -> ErrorMap:
    def answered(status: int, text: str) -> Exception:
        return RuntimeError(status, text)

    def unreachable(exc: Any) -> Exception:
        return RuntimeError(0, str(exc))

    return ErrorMap(answered=answered, unreachable=unreachable, timed_out=lambda: RuntimeError(0, "timeout"))
