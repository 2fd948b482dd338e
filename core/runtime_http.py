"""A lean HTTP/1.1 client for runtimes on this machine: the relay's hot path (``core.relay``).

aiohttp's ``ClientSession`` builds a ``ClientRequest`` (URL, header multidicts, default headers,
cookies, traces, timers) for every request, and its ``StreamReader`` does a few Python calls of
bookkeeping for every HTTP chunk, which is every SSE event of a runtime's stream. ``RuntimePool``
writes the request as one pre-built block of bytes on a pooled connection, parses the answer's
status line and headers once, and takes its body off the chunked framing a whole socket read at
a time into a ``Body``: the part of aiohttp's ``StreamReader`` the relay uses (``readany``,
``read_nowait``, ``read``, ``is_eof``, ``set_exception``, ``exception``). The failures are
aiohttp's own exceptions, so the relay treats them alike: before the headers a clean hang-up is
``ServerDisconnectedError`` and a reset ``ClientOSError`` (both retried), a connect that takes
over 10 s is ``ConnectionTimeoutError``; a body cut short is ``ClientPayloadError``. A body kept
past ``Body.HIGH_WATER`` (a client slower than the runtime) pauses reading the runtime. A
connection is kept ``keepalive_s`` idle at most, and reused only after an answer read to its end.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast
from urllib.parse import urlsplit

import aiohttp
from aiohttp.tcp_helpers import tcp_nodelay
from multidict import CIMultiDict, CIMultiDictProxy

CONNECT_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 128 * 1024  # a status line and headers longer than this are refused
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_HEAD, _BODY, _DONE = 0, 1, 2  # what a connection reads now
_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2  # how a body ends


class BadAnswer(aiohttp.ClientError):
    """The runtime's answer is not HTTP/1.1 this client reads (a malformed head or chunk)."""


class Body:
    """A runtime's answer body as it comes, for the relay to read (aiohttp's ``StreamReader`` calls)."""

    HIGH_WATER = 256 * 1024  # kept unread past this, the runtime's connection stops being read

    __slots__ = ("_buffer", "_conn", "_eof", "_exception", "_size", "_waiter")

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self._buffer: list[bytes] = []
        self._size = 0
        self._eof = False
        self._exception: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def feed(self, data: bytes) -> None:
        self._buffer.append(data)
        self._size += len(data)
        self._wake()
        if self._size > self.HIGH_WATER:
            self._conn.pause()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def set_exception(self, exc: BaseException) -> None:
        self._exception = exc
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_exception(exc)

    def exception(self) -> BaseException | None:
        return self._exception

    def is_eof(self) -> bool:
        return self._eof

    def read_nowait(self) -> bytes:
        if self._exception is not None:
            raise self._exception
        return self._take(-1)

    def _take(self, n: int) -> bytes:
        buffer = self._buffer
        if not buffer:
            return b""
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        if 0 <= n < len(data):
            data, rest = data[:n], data[n:]
            buffer.append(rest)
        self._size = len(buffer[0]) if buffer else 0
        if self._size <= self.HIGH_WATER:
            self._conn.resume()
        return data

    async def _wait(self) -> None:
        waiter = self._waiter = self._conn.loop.create_future()
        try:
            await waiter  # a cancelled wait loses nothing: the bytes stay buffered
        finally:
            self._waiter = None

    async def readany(self) -> bytes:
        """What came since the last read; b"" at the end; the body's failure raised."""
        while True:
            if self._exception is not None:
                raise self._exception
            if self._buffer or self._eof:
                return self._take(-1)
            await self._wait()

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes: waits until that many came or the body ended."""
        while True:
            if self._exception is not None:
                raise self._exception
            if self._size >= n or self._eof:
                return self._take(n)
            await self._wait()


class _Conn(asyncio.Protocol):
    """One connection to a runtime: reads one answer at a time into its ``Body``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.state = _DONE
        self.reusable = True
        self.paused = False
        self.head: asyncio.Future[tuple[int, str, CIMultiDictProxy[str]]] | None = None
        self.pending = b""  # bytes of the head, a chunk's size line or its CRLF not yet complete
        self.body: Body | None = None
        self.framing = _LENGTH
        self.left = 0  # bytes of the body (_LENGTH) or of the current chunk (_CHUNKED) still to come
        self.crlf = False  # a chunk's data came whole: its CRLF is next
        self.trailers = False  # the last chunk came: trailer lines until an empty one
        self.skip_body = False

    # --- the connection -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not asyncio's class
        tcp_nodelay(self.transport, True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.reusable = False
        if self.state == _HEAD and self.head is not None and not self.head.done():
            # Nothing of the answer came: aiohttp's exceptions for it, which the relay retries.
            failure: Exception = (aiohttp.ServerDisconnectedError() if exc is None else
                                  aiohttp.ClientOSError(*exc.args) if isinstance(exc, OSError) else
                                  aiohttp.ClientConnectionError(str(exc)))
            self.head.set_exception(failure)
        elif self.state == _BODY and self.body is not None:
            if self.framing == _UNTIL_CLOSE and exc is None:
                self._done()
            else:
                why = f"Response payload is not completed: {exc!r}" if exc else "Response payload is not completed"
                self.body.set_exception(aiohttp.ClientPayloadError(why))
        self.state = _DONE

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def is_connected(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # --- one exchange ---------------------------------------------------------------------------
    def send(self, request: bytes, head_only: bool) -> asyncio.Future[tuple[int, str, CIMultiDictProxy[str]]]:
        assert self.transport is not None and self.state == _DONE
        self.state, self.pending, self.skip_body = _HEAD, b"", head_only
        self.body, self.crlf, self.trailers = None, False, False
        self.head = self.loop.create_future()
        self.transport.write(request)
        return self.head

    def data_received(self, data: bytes) -> None:
        if self.state == _BODY:
            self._body_bytes(data)
        elif self.state == _HEAD:
            self._head_bytes(self.pending + data if self.pending else data)
        else:  # bytes after the answer's end: this connection is not reused
            self.reusable = False

    def _fail(self, why: str) -> None:
        exc = BadAnswer(why)
        if self.state == _HEAD and self.head is not None and not self.head.done():
            self.head.set_exception(exc)
        elif self.body is not None:
            self.body.set_exception(aiohttp.ClientPayloadError(why))
        self.state = _DONE
        self.close()

    def _head_bytes(self, data: bytes) -> None:
        while True:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > MAX_HEAD_BYTES:
                    self._fail("the answer's status line and headers are too long")
                else:
                    self.pending = data
                return
            head, data = data[:end], data[end + 4:]
            lines = head.split(b"\r\n")
            status_line = lines[0]
            if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12 or not status_line[9:12].isdigit():
                self._fail(f"not an HTTP/1.x status line: {status_line[:100]!r}")
                return
            status = int(status_line[9:12])
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue): the real one follows
            headers: CIMultiDict[str] = CIMultiDict()
            for line in lines[1:]:
                name, colon, value = line.partition(b":")
                if not colon or not name or name != name.strip() or name[:1] in b" \t":
                    self._fail(f"a malformed header line: {line[:100]!r}")
                    return
                headers.add(name.decode("utf-8", "surrogateescape"), value.strip().decode("utf-8", "surrogateescape"))
            break
        self.pending = b""
        if status_line[5:8] != b"1.1" or "close" in headers.get("Connection", "").lower():
            self.reusable = False
        body = self.body = Body(self)
        length = headers.get("Content-Length")
        coding = headers.get("Transfer-Encoding")
        if self.skip_body or status in (101, 204, 304):
            body.feed_eof()
            self.state = _DONE
            if status == 101:
                self.reusable = False
        elif coding is not None and coding.lower().rsplit(",", 1)[-1].strip() == "chunked":
            self.state, self.framing, self.left = _BODY, _CHUNKED, 0
        elif coding is None and length is not None:
            if not length.isdigit():
                self._fail(f"a malformed Content-Length: {length[:40]!r}")
                return
            self.state, self.framing, self.left = _BODY, _LENGTH, int(length)
            if self.left == 0:
                self._done()
        else:
            self.state, self.framing, self.reusable = _BODY, _UNTIL_CLOSE, False
        assert self.head is not None
        self.head.set_result((status, status_line[13:].decode("latin-1"), CIMultiDictProxy(headers)))
        if data and self.state == _BODY:
            self._body_bytes(data)
        elif data:
            self.reusable = False

    def _done(self) -> None:
        self.state = _DONE
        if self.body is not None:
            self.body.feed_eof()

    def _body_bytes(self, data: bytes) -> None:
        body = self.body
        assert body is not None
        if self.framing == _LENGTH:
            if len(data) >= self.left:
                if len(data) > self.left:
                    self.reusable = False
                    data = data[:self.left]
                self.left = 0
                if data:
                    body.feed(data)
                self._done()
            else:
                self.left -= len(data)
                body.feed(data)
            return
        if self.framing == _UNTIL_CLOSE:
            body.feed(data)
            return
        if self.pending:
            data = self.pending + data
            self.pending = b""
        out: list[bytes] = []
        pos, size = 0, len(data)
        while pos < size:
            if self.left:
                take = min(self.left, size - pos)
                out.append(data[pos:pos + take] if take < size or pos else data)
                pos += take
                self.left -= take
                if self.left:
                    break
                self.crlf = True
                continue
            if self.crlf:
                if size - pos < 2:
                    break
                if data[pos:pos + 2] != b"\r\n":
                    self._fail("a chunk without its CRLF")
                    return
                pos += 2
                self.crlf = False
                continue
            end = data.find(b"\r\n", pos)
            if end < 0:
                if size - pos > 8192:
                    self._fail("a chunk size line too long")
                    return
                break
            line, pos = data[pos:end], end + 2
            if self.trailers:
                if not line:  # the empty line after the last chunk (and its trailers): the end
                    if out:
                        body.feed(out[0] if len(out) == 1 else b"".join(out))
                    if pos < size:
                        self.reusable = False
                    self._done()
                    return
                continue
            try:
                chunk = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._fail(f"a malformed chunk size line: {line[:40]!r}")
                return
            if chunk == 0:
                self.trailers = True
            else:
                self.left = chunk
        if pos < size:
            self.pending = data[pos:]
        if out:
            body.feed(out[0] if len(out) == 1 else b"".join(out))


class Answer:
    """A runtime's answer: its status line and headers, ``content`` (its ``Body``), and ``close``
    (the connection goes back to the pool when the answer was read to its end)."""

    __slots__ = ("_conn", "_key", "_pool", "content", "content_length", "content_type", "headers", "reason",
                 "status")

    def __init__(self, status: int, reason: str | None, headers: CIMultiDictProxy[str], content: Body,
                 conn: _Conn, pool: RuntimePool | None, key: tuple[str, int]) -> None:
        self.status, self.reason, self.headers, self.content = status, reason, headers, content
        kind = headers.get("Content-Type")
        self.content_type = kind.partition(";")[0].strip().lower() if kind else "application/octet-stream"
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None
        self._conn: _Conn | None = conn
        self._pool, self._key = pool, key

    def close(self) -> None:
        """Back to the pool if the answer was read whole; else the connection is closed, which makes
        the runtime drop the generation and free its slot."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        pool = self._pool
        if (pool is not None and not pool.closed and conn.state == _DONE and conn.reusable
                and self.content.is_eof() and self.content.exception() is None and conn.is_connected()):
            conn.resume()
            pool.put(self._key, conn)
        else:
            conn.close()


class RuntimePool:
    """Keep-alive connections to plain-HTTP runtimes, by host and port."""

    def __init__(self, keepalive_s: float) -> None:
        self.keepalive_s = keepalive_s
        self.closed = False
        self._idle: dict[tuple[str, int], list[tuple[float, _Conn]]] = {}
        self._bases: dict[str, tuple[str, int, bytes]] = {}

    def put(self, key: tuple[str, int], conn: _Conn) -> None:
        self._idle.setdefault(key, []).append((time.monotonic(), conn))

    def _take(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        fresh_since = time.monotonic() - self.keepalive_s
        while idle:
            since, conn = idle.pop()  # the most recent first: the least likely to be closing
            if since > fresh_since and conn.is_connected() and conn.reusable:
                return conn
            conn.close()
        return None

    def _where(self, base: str) -> tuple[str, int, bytes]:
        found = self._bases.get(base)
        if found is None:
            parts = urlsplit(base)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"not a plain-HTTP base URL: {base!r}")
            port = parts.port or 80
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            found = self._bases[base] = (parts.hostname, port, f"{host}:{port}".encode())
        return found

    async def request(self, method: str, base: str, path_qs: str, headers: list[tuple[str, str]], body: bytes,
                      *, fresh: bool = False) -> Answer:
        """``method`` ``base`` + ``path_qs`` with ``headers`` (no Host, Content-Length or hop-by-hop
        ones: set here) and ``body``. ``fresh``: on a connection of its own, closed after it."""
        host, port, host_header = self._where(base)
        key = (host, port)
        conn = None if fresh else self._take(key)
        if conn is None:
            conn = await _connect(host, port)
        lines = [f"{method} {path_qs} HTTP/1.1\r\nHost: ".encode(), host_header, b"\r\n"]
        for name, value in headers:
            lines.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
        if body or method not in _NO_BODY_METHODS:
            lines.append(f"Content-Length: {len(body)}\r\n".encode())
        lines.append(b"\r\n")
        lines.append(body)
        try:
            status, reason, answer_headers = await conn.send(b"".join(lines), method == "HEAD")
        except BaseException:
            conn.close()
            raise
        assert conn.body is not None
        return Answer(status, reason, answer_headers, conn.body, conn, None if fresh else self, key)

    def close(self) -> None:
        self.closed = True
        for idle in self._idle.values():
            for _since, conn in idle:
                conn.close()
        self._idle.clear()


async def _connect(host: str, port: int) -> _Conn:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _transport, conn = await loop.create_connection(lambda: _Conn(loop), host, port)
    except TimeoutError as exc:
        raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host http://{host}:{port}") from exc
    except OSError as exc:
        raise aiohttp.ClientOSError(exc.errno, f"Cannot connect to host {host}:{port} [{exc.strerror or exc}]") from exc
    return conn
