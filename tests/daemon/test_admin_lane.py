"""The admin lane (``daemon.admin_lane``): ``GET /api/status`` answers while the daemon's loop is busy,
and every other call on the same port and connection still reaches the daemon as before."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from daemon.admin_lane import StatusLane
from daemon.api.models import DaemonSettings, StatusResponse
from daemon.config import DaemonConfig
from tests.daemon.harness import RunningDaemon, running_daemon

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def d(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningDaemon]:
    async with running_daemon(tmp_path_factory.mktemp("lane") / "home", None, local_agent=False) as running:
        yield running


def _status_from_a_thread(url: str, token: str, got: dict[str, object], done: threading.Event) -> None:
    request = urllib.request.Request(f"{url}/api/status", headers={"Authorization": f"Bearer {token}",
                                                                    "X-Request-Id": "lane-1"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            got["body"], got["id"] = json.loads(answer.read()), answer.headers["X-Request-Id"]
    finally:
        done.set()


async def test_status_answers_while_the_loop_is_held(d: RunningDaemon) -> None:
    """The tray app's status call gets its answer while the daemon's loop is stuck in one long turn
    (here: this test holds it; under load: thousands of /v1 callbacks)."""
    got: dict[str, object] = {}
    done = threading.Event()
    caller = threading.Thread(target=_status_from_a_thread, args=(d.url, d.daemon.admin_token, got, done))
    caller.start()
    answered_while_held = done.wait(30)  # blocks the daemon's loop (this test's own) until the answer came
    caller.join()
    assert answered_while_held and got["id"] == "lane-1"
    lane = StatusResponse.model_validate(got["body"])
    looped = await d.client.status()
    assert lane.daemon == looped.daemon and lane.last_event_id == looped.last_event_id
    assert lane.keys_at_rest == looped.keys_at_rest


async def test_writes_and_reads_share_the_port_and_connection(d: RunningDaemon) -> None:
    """Status, a write, status again over one keep-alive connection: each call reaches what answers
    it, and the read after the write sees it (the settings change here)."""
    headers = {"Authorization": f"Bearer {d.daemon.admin_token}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        base = d.url
        async with session.get(f"{base}/api/status", headers=headers) as first:
            assert first.status == 200 and first.headers["Content-Type"] == "application/json; charset=utf-8"
            keys_required = StatusResponse.model_validate(await first.json()).daemon.keys_required
        async with session.post(f"{base}/api/keys", headers=headers, json={"name": "lane"}) as created:
            assert created.status == 201
        body = DaemonSettings(require_api_keys=not keys_required).model_dump(exclude_unset=True)
        async with session.put(f"{base}/api/settings", headers=headers, json=body) as put:
            assert put.status == 200
        async with session.get(f"{base}/api/status", headers=headers) as after:
            assert StatusResponse.model_validate(await after.json()).daemon.keys_required is not keys_required
        async with session.get(f"{base}/api/status", headers={"Authorization": "Bearer wrong"}) as refused:
            assert refused.status == 401 and (await refused.json())["error"]["code"] == "invalid_admin_token"
    await d.client.put_settings(DaemonSettings(require_api_keys=keys_required))


async def test_a_request_whose_body_comes_later_reaches_the_daemon_whole(d: RunningDaemon) -> None:
    """A client that sends its head, then its body: the daemon gets both, in order."""
    body = json.dumps({"name": "lane-late-body"}).encode()
    head = (f"POST /api/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {d.daemon.admin_token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    port = d.daemon.config.port

    def call() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head)
            sock.sendall(body[:5])
            sock.sendall(body[5:])
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            return answer

    answer = await asyncio.get_running_loop().run_in_executor(None, call)
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    assert b'"name":"lane-late-body"' in answer


async def test_a_status_the_lane_cannot_build_goes_to_the_loop() -> None:
    """A part changing under the lane's read (or anything unusual in the call) leaves the call to aiohttp."""
    def changing() -> str:
        raise RuntimeError("dictionary changed size during iteration")

    config = DaemonConfig.model_validate({"port": 0})
    head = b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t"
    assert StatusLane(config, "t", changing).answer(head) is None
    lane = StatusLane(config, "t", lambda: "{}")
    answer = lane.answer(head)
    assert answer is not None and answer[0].endswith(b"\r\n\r\n{}") and answer[1] is True
    for other in (head.replace(b"Bearer t", b"Bearer x"), head.replace(b"127.0.0.1", b"evil.example"),
                  head + b"\r\nOrigin: http://evil.example", head + b"\r\nContent-Length: 0",
                  head.replace(b"/api/status", b"/api/status?x=1"), head.replace(b"GET", b"HEAD")):
        assert lane.answer(other) is None, other


async def test_pipelined_calls_are_answered_in_order(d: RunningDaemon) -> None:
    """Two calls in one write (the second before the first's answer): aiohttp answers both, in order."""
    call = (f"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {d.daemon.admin_token}\r\n"
            "X-Request-Id: {}\r\n\r\n")
    port = d.daemon.config.port

    def both() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall((call.format("first") + call.format("second").replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n"))
                         .encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            return answer

    answer = await asyncio.get_running_loop().run_in_executor(None, both)
    assert answer.count(b"HTTP/1.1 200") == 2
    assert answer.index(b"X-Request-Id: first") < answer.index(b"X-Request-Id: second")
