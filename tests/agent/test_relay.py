"""The one relay (``core.relay``) against real aiohttp servers: a fake upstream that resets,
breaks off or sends hop-by-hop headers, in front of it the agent's proxy (``agent.proxy.forward``)
and a bare relay handler as the daemon's router calls it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from agent.proxy import RuntimeConnections, forward
from core.relay import (
    BROKEN_CODE,
    Record,
    Unreachable,
    Upstream,
    forwardable,
    relay,
    runtime_session,
)
from tests.fakes.serving import serving

KEY = "sk-instance-key"
HOP_REQUEST = {"Connection": "keep-alive, X-Named-Hop", "X-Named-Hop": "drop me", "Keep-Alive": "timeout=5",
               "TE": "trailers", "Proxy-Authorization": "Basic eA==", "Upgrade": "h2c", "X-Kept": "kept",
               "Authorization": "Bearer the-daemon-key"}
HOP_ANSWER = {"Connection": "X-Named-Back", "X-Named-Back": "drop me", "Keep-Alive": "timeout=5",
              "Proxy-Authenticate": "Basic", "Trailer": "X-Sum", "X-Kept-Back": "kept"}


@dataclass
class FakeUpstream:
    """A runtime-like server: counts connections, resets or breaks off on request."""

    resets_left: int = 0
    connections: set[int] = field(default_factory=set)
    requests: int = 0
    seen_headers: dict[str, str] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        assert request.transport is not None
        self.connections.add(id(request.transport))
        if self.resets_left:
            self.resets_left -= 1
            request.transport.abort()  # refused in effect: not one byte of an answer
            raise ConnectionResetError("reset before answering")
        self.seen_headers = dict(request.headers)
        kind = request.match_info["kind"]
        if kind == "headers":
            response = web.json_response({"ok": True})
            response.headers.extend(HOP_ANSWER)
            return response
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in ("Hello", " there"):
            await response.write(f"data: {json.dumps({'choices': [{'delta': {'content': word}}]})}\n\n".encode())
        if kind == "break":
            request.transport.abort()  # dies mid-answer
            raise ConnectionResetError("broke off")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@dataclass
class FakeRun:
    """What ``agent.proxy.forward`` reads of a runtime run (the seam: endpoint and key)."""

    endpoint: str
    api_key: str = KEY

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    app = web.Application()
    app.router.add_route("*", "/v1/{kind}", fake.handle)
    async with serving(app, handler_cancellation=True) as url:
        yield fake, url


@pytest.fixture
async def agent_proxy(upstream: tuple[FakeUpstream, str]) -> AsyncIterator[str]:
    """The agent's proxy handler in front of the fake upstream, as ``agent.server`` mounts it."""
    _fake, base = upstream
    connections = RuntimeConnections()

    async def handle(request: web.Request) -> web.StreamResponse:
        return await forward(request, FakeRun(base), request.match_info["path"], connections)  # type: ignore[arg-type]

    app = web.Application()
    app.router.add_route("*", "/proxy/m/{path:.*}", handle)
    try:
        async with serving(app, handler_cancellation=True) as url:
            yield f"{url}/proxy/m"
    finally:
        await connections.close()


@dataclass
class RouterLike:
    """The relay called as the daemon's router calls it: a record, a label, a request id."""

    records: list[Record] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)


@pytest.fixture
async def router_like(upstream: tuple[FakeUpstream, str]) -> AsyncIterator[tuple[RouterLike, str]]:
    _fake, base = upstream
    seen = RouterLike()
    session = runtime_session(False)

    async def handle(request: web.Request) -> web.StreamResponse:
        record = Record()
        seen.records.append(record)
        target = Upstream(base, {"Authorization": f"Bearer {KEY}"}, session, False, KEY)
        try:
            return await relay(request, target, request.path_qs, await request.read(), record=record,
                               log=logging.getLogger("tests.relay"), label="request r-1 to 'm'",
                               request_id="r-1", tail_bytes=64)
        except Unreachable as exc:
            seen.unreachable.append(str(exc))
            return web.json_response({"error": {"code": "upstream_unreachable", "message": str(exc)}}, status=502)

    app = web.Application()
    app.router.add_route("*", "/v1/{kind}", handle)
    try:
        async with serving(app, handler_cancellation=True) as url:
            yield seen, url
    finally:
        await session.close()


async def _ending(url: str) -> tuple[list[bytes], str | None]:
    """The events a client got, and how the stream ended (None: complete; else the client's error)."""
    events: list[bytes] = []
    async with aiohttp.ClientSession() as session, session.post(url, json={"model": "m", "stream": True}) as resp:
        assert resp.status == 200
        try:
            async for line in resp.content:
                if line.strip():
                    events.append(line.strip())
        except aiohttp.ClientPayloadError as exc:
            return events, type(exc).__name__
    return events, None


async def test_a_reset_before_any_answer_is_retried_once_on_a_fresh_connection(
        upstream: tuple[FakeUpstream, str], router_like: tuple[RouterLike, str],
        caplog: pytest.LogCaptureFixture) -> None:
    fake, _ = upstream
    seen, url = router_like
    fake.resets_left = 1
    caplog.set_level(logging.WARNING, logger="tests.relay")
    events, ended = await _ending(f"{url}/v1/stream")
    assert ended is None and events[-1] == b"data: [DONE]"
    assert fake.requests == 2 and len(fake.connections) == 2  # the retry opened its own connection
    [record] = seen.records
    assert record.status == 200 and len(record.failures) == 1
    assert record.failures[0].startswith("attempt 1: ") and KEY not in record.failures[0]
    logged = [r.getMessage() for r in caplog.records if r.name == "tests.relay"]
    assert logged == [f"request r-1 to 'm' failed before any answer, {record.failures[0]}"]


async def test_a_runtime_that_keeps_resetting_is_unreachable_after_three_tries(
        upstream: tuple[FakeUpstream, str], router_like: tuple[RouterLike, str]) -> None:
    fake, _ = upstream
    seen, url = router_like
    fake.resets_left = 1000
    async with aiohttp.ClientSession() as session, session.post(f"{url}/v1/stream", json={"model": "m"}) as resp:
        assert resp.status == 502
    assert fake.requests == 3 and len(seen.unreachable) == 1
    assert [f.split(":")[0] for f in seen.records[0].failures] == ["attempt 1", "attempt 2", "attempt 3"]


async def test_a_refused_connection_is_tried_three_times_then_unreachable() -> None:
    """Nothing listens: refused before anything was sent, so retried; the agent answers 502."""
    with_nobody = socket_free_port()
    session = runtime_session(False)
    record = Record()
    try:
        app = web.Application()

        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                return await relay(request, Upstream(f"http://127.0.0.1:{with_nobody}", {}, session, False),
                                   "/v1/x", b"", record=record, log=logging.getLogger("tests.relay"), label="r")
            except Unreachable as exc:
                return web.Response(status=502, text=str(exc))

        app.router.add_get("/x", handle)
        async with serving(app, handler_cancellation=True) as url, aiohttp.ClientSession() as client, \
                client.get(f"{url}/x") as resp:
            assert resp.status == 502 and "Connect" in await resp.text()
    finally:
        await session.close()
    assert [f.split(":")[0] for f in record.failures] == ["attempt 1", "attempt 2", "attempt 3"]


def socket_free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_stream_broken_mid_answer_ends_the_same_way_via_the_agent_proxy_and_the_router_relay(
        upstream: tuple[FakeUpstream, str], agent_proxy: str, router_like: tuple[RouterLike, str]) -> None:
    fake, _ = upstream
    seen, router_url = router_like
    via_agent = await _ending(f"{agent_proxy}/v1/break")
    via_router = await _ending(f"{router_url}/v1/break")
    for events, ended in (via_agent, via_router):
        assert ended == "ClientPayloadError"  # cut without a final chunk: never taken for complete
        assert len(events) == 3 and b"[DONE]" not in b"".join(events)
        error = json.loads(events[-1].removeprefix(b"data: "))["error"]
        assert (error["code"], error["type"]) == (BROKEN_CODE, "server_error")
    assert via_agent[0][:2] == via_router[0][:2]  # the same answer up to the break
    [record] = seen.records
    assert record.status == 502 and "broke after" in record.failures[-1]
    assert json.loads(via_router[0][-1].removeprefix(b"data: "))["error"]["request_id"] == "r-1"
    assert fake.requests == 2  # a broken answer is never retried


async def test_an_agent_that_already_said_the_stream_broke_is_not_echoed_twice(
        upstream: tuple[FakeUpstream, str], agent_proxy: str) -> None:
    """The router relaying an agent relaying a runtime: one error event reaches the client."""
    session = runtime_session(False)
    record = Record()
    try:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await relay(request, Upstream(agent_proxy, {}, session, False), "/v1/break", b"{}",
                               record=record, log=logging.getLogger("tests.relay"), label="r", request_id="r-2")

        app = web.Application()
        app.router.add_post("/v1/break", handle)
        async with serving(app, handler_cancellation=True) as url:
            events, ended = await _ending(f"{url}/v1/break")
    finally:
        await session.close()
    assert ended == "ClientPayloadError"
    assert sum(BROKEN_CODE.encode() in e for e in events) == 1 and len(events) == 3
    assert record.status == 502 and "broke after" in record.failures[-1]


@pytest.mark.parametrize("front", ["agent", "router"])
async def test_hop_by_hop_headers_are_dropped_both_ways(
        front: str, upstream: tuple[FakeUpstream, str], agent_proxy: str,
        router_like: tuple[RouterLike, str]) -> None:
    fake, _ = upstream
    url = f"{agent_proxy}/v1/headers" if front == "agent" else f"{router_like[1]}/v1/headers"
    async with aiohttp.ClientSession() as session, session.post(url, json={"model": "m"}, headers=HOP_REQUEST) as resp:
        assert resp.status == 200
        got = resp.headers
    sent = {k.lower(): v for k, v in fake.seen_headers.items()}
    for name in ("x-named-hop", "keep-alive", "te", "proxy-authorization", "upgrade"):
        assert name not in sent, name
    assert sent["x-kept"] == "kept" and sent["authorization"] == f"Bearer {KEY}"  # the runtime's key, not ours
    assert sent.get("connection", "keep-alive").lower() in ("keep-alive", "close")  # aiohttp's own
    for name in ("X-Named-Back", "Keep-Alive", "Proxy-Authenticate", "Trailer"):
        assert name not in got, name
    assert got["X-Kept-Back"] == "kept"


def test_forwardable_drops_what_connection_names_on_any_of_its_lines() -> None:
    from multidict import CIMultiDict

    headers = CIMultiDict([("Connection", "X-A"), ("connection", " x-b ,"), ("X-A", "1"), ("X-B", "2"),
                           ("X-C", "3"), ("Host", "h"), ("Content-Length", "4"), ("Trailers", "x")])
    assert list(forwardable(headers).items()) == [("X-C", "3")]
