"""The daemon's port, accepted on a thread of its own, so ``GET /api/status`` answers while /v1 saturates the loop.

With a thousand streams relayed, one turn of the daemon's loop runs thousands of callbacks, and an
admin request waited behind them for several turns (its read, its handler's task, its write).
``LaneSite`` (an aiohttp site, so the runner starts and stops it like a ``TCPSite``) listens on
the daemon's one address from a thread with its own event loop. Each connection's request head is
read there: a plain ``GET /api/status`` (HTTP/1.1, no body, no Origin, the admin token, a loopback
Host while the daemon is loopback-only) is answered there, from ``AdminApi.status_body`` reading
the live state (the GIL's switch interval, set to 1 ms, not the loop's turns, bounds its waits). Anything else
hands the connection, with the bytes read so far, to the daemon's loop, where aiohttp serves it as
though it had accepted it (middlewares, errors, routes, shutdown), and there it stays. A status
answer that cannot be built off the loop (a part changing under it) is handed over the same way.
Read-your-writes holds: a write's answer is sent after its change, which the next read sees.
POSIX only (``daemon.server``): on Windows the port is a plain ``TCPSite``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

from daemon import admin_token
from daemon.config import DaemonConfig
from daemon.host_check import LOOPBACK_HOSTS, host_of
from daemon.router.router import REQUEST_ID_RE

_LOGGER = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024  # a longer head goes to aiohttp, which refuses it in the API's shape
STATUS_TARGET = b"/api/status"
# How long a thread waiting for the GIL waits before the holder must hand it over (CPython's default
# is 5 ms). The lane's thread waits for it a few times per call, behind a loop thread that always
# wants it; a thread that does not wait (the lane idle in its poll) costs the loop nothing.
SWITCH_INTERVAL_S = 0.001
# A header that makes the request other than plain: aiohttp answers it.
NOT_PLAIN = frozenset({"content-length", "transfer-encoding", "expect", "upgrade", "origin"})


class StatusLane:
    """What the lane needs to answer ``GET /api/status`` itself: the token, the loopback rule and the body."""

    def __init__(self, config: DaemonConfig, token: str, status_body: Callable[[], str]) -> None:
        self.config = config
        self.token = token
        self.status_body = status_body

    def answer(self, head: bytes) -> tuple[bytes, bool] | None:
        """The whole HTTP answer to ``head`` when it is a plain status call, and whether the connection
        stays open after it; None hands the request to aiohttp."""
        lines = head.split(b"\r\n")
        if lines[0] not in (b"GET " + STATUS_TARGET + b" HTTP/1.1",):
            return None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            key = name.strip().decode("latin-1").lower()
            if not sep or key in headers or key in NOT_PLAIN:
                return None
            headers[key] = value.strip().decode("latin-1")
        connection = headers.get("connection", "keep-alive").lower()
        if connection not in ("keep-alive", "close"):
            return None
        if self.config.loopback_only and host_of(headers.get("host", "")).lower() not in LOOPBACK_HOSTS:
            return None
        if not admin_token.matches(self.token, headers.get("authorization")):
            return None
        try:
            body = self.status_body().encode()
        except Exception:
            _LOGGER.debug("status off the loop failed; the loop answers it", exc_info=True)
            return None
        given = headers.get("x-request-id", "")
        request_id = given if given and REQUEST_ID_RE.match(given) else os.urandom(16).hex()
        closing = b"Connection: close\r\n" if connection == "close" else b""
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
                b"Content-Length: %d\r\nDate: %s\r\nServer: %s\r\nX-Request-Id: %s\r\n%s\r\n"
                % (len(body), formatdate(usegmt=True).encode(), SERVER_SOFTWARE.encode(), request_id.encode(),
                   closing)) + body, not closing


class _Handover(asyncio.Protocol):
    """Puts aiohttp's protocol on a handed-over connection, feeds it what the lane read, and steps aside."""

    def __init__(self, inner: asyncio.Protocol, data: bytes) -> None:
        self._inner = inner
        self._data = data

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)
        transport.set_protocol(self._inner)
        if self._data:
            self._inner.data_received(self._data)


class _Connection(asyncio.Protocol):
    """One client connection while the lane holds it."""

    def __init__(self, site: LaneSite) -> None:
        self._site = site
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._handing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._site.held.add(self)
        transport.set_write_buffer_limits(high=0)  # pause_writing at once: a hand-over waits for the answer sent

    def connection_lost(self, exc: Exception | None) -> None:
        self._site.held.discard(self)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if self._handing or (end < 0 and len(self._buffer) <= MAX_HEAD):
            return  # the rest of the head is on its way
        # Bytes past the head (a body, a pipelined call) are aiohttp's to read.
        answer = self._site.lane.answer(self._buffer[:end]) if 0 <= end == len(self._buffer) - 4 else None
        if answer is None:
            self._hand_over()
            return
        assert self._transport is not None
        self._buffer = b""
        self._transport.write(answer[0])
        if not answer[1]:
            self._transport.close()  # once the answer is sent

    def _hand_over(self) -> None:
        assert self._transport is not None
        self._handing = True
        self._transport.pause_reading()
        if not self._transport.get_write_buffer_size():
            self._give()

    def resume_writing(self) -> None:
        if self._handing:
            self._give()

    def _give(self) -> None:
        assert self._transport is not None
        sock = self._transport.get_extra_info("socket")
        copy = socket.fromfd(sock.fileno(), sock.family, sock.type, sock.proto)  # the loop's own descriptor
        self._transport.abort()  # closes the lane's descriptor; the connection lives on in the copy
        self._site.hand_over(copy, self._buffer)


class LaneSite(web.BaseSite):
    """``web.TCPSite``'s place for the daemon's port: the lane's thread accepts, the runner's server serves."""

    __slots__ = ("_adopting", "_host", "_lane_loop", "_lane_server", "_loop", "_port", "_thread", "held", "lane")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, lane: StatusLane) -> None:
        super().__init__(runner)
        self._host, self._port, self.lane = host, port, lane
        self.held: set[_Connection] = set()
        self._lane_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lane_server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._adopting: set[asyncio.Task[Any]] = set()

    @property
    def name(self) -> str:
        return f"http://{self._host or '0.0.0.0'}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> None:
        await super().start()
        self._loop = asyncio.get_running_loop()
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        # A plain loop, whatever the process's policy: in the app (the demo's daemon) that is qasync's,
        # whose loops are Qt's and belong to its main thread.
        self._lane_loop = asyncio.DefaultEventLoopPolicy().new_event_loop()
        self._thread = threading.Thread(target=self._lane_loop.run_forever, name="admin-lane", daemon=True)
        self._thread.start()
        try:
            self._lane_server = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                self._lane_loop.create_server(lambda: _Connection(self), self._host, self._port, backlog=self._backlog),
                self._lane_loop))
        except BaseException:
            await self._stop_thread()
            raise
        if self._lane_server.sockets:
            self._port = self._lane_server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        await self._stop_thread()
        await super().stop()

    async def _stop_thread(self) -> None:
        lane_loop, thread = self._lane_loop, self._thread
        if lane_loop is None or thread is None:
            return

        async def close() -> None:
            if self._lane_server is not None:
                self._lane_server.close()
            for connection in list(self.held):  # idle keep-alive connections, as aiohttp's shutdown closes them
                connection.close()
            await asyncio.sleep(0)  # their connection_lost

        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(close(), lane_loop))
        lane_loop.call_soon_threadsafe(lane_loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        lane_loop.close()
        self._lane_loop = self._thread = None

    def hand_over(self, sock: socket.socket, data: bytes) -> None:
        """From the lane's thread: the daemon's loop takes the connection, ``data`` first."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._adopt, sock, data)

    def _adopt(self, sock: socket.socket, data: bytes) -> None:
        server = self._runner.server
        if server is None or self._lane_loop is None:  # stopped meanwhile
            sock.close()
            return
        assert self._loop is not None
        task = self._loop.create_task(self._loop.connect_accepted_socket(lambda: _Handover(server(), data), sock))
        self._adopting.add(task)
        task.add_done_callback(self._adopted)

    def _adopted(self, task: asyncio.Task[Any]) -> None:
        self._adopting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _LOGGER.warning("a connection could not be handed to the daemon's loop: %s", task.exception())
