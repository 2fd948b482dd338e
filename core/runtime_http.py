"""A lean HTTP/1.1 client for runtimes on this machine: the relay's hot path (``core.relay``).

aiohttp's ``ClientSession`` builds a ``ClientRequest`` (URL, header multidicts, default headers,
cookies, traces, timers) for every request; for a plain-HTTP runtime on the loopback that was
about a sixth of the daemon's CPU per ``/v1`` request. ``RuntimePool`` writes the request as one
pre-built block of bytes on a pooled connection and reads the answer with aiohttp's own response
protocol (its C parser, its ``StreamReader``, its exceptions), so the relay treats the answer as it
treats aiohttp's: the same failures before the headers (``ServerDisconnectedError``,
``ClientOSError``, a connect timeout; ``BadAnswer``, a ``ClientError``, for a head that does not
parse), the same ``ClientPayloadError`` for an answer that broke, the same ``set_exception`` for a
stall or a stop. Connections are kept ``keepalive_s`` idle at most, and one is reused only after
an answer read to its end.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDictProxy

CONNECT_TIMEOUT_S = 10.0
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class BadAnswer(aiohttp.ClientError):
    """The runtime's status line or headers do not parse (as aiohttp's session says with its
    ``ClientResponseError``): no answer, not retried."""


class Answer:
    """A runtime's answer: its status line and headers, ``content`` (aiohttp's ``StreamReader``),
    and ``close`` (the connection goes back to the pool when the answer was read to its end)."""

    __slots__ = ("_key", "_pool", "_protocol", "content", "content_length", "content_type", "headers",
                 "reason", "status")

    def __init__(self, status: int, reason: str | None, headers: CIMultiDictProxy[str], content: aiohttp.StreamReader,
                 protocol: ResponseHandler, pool: RuntimePool | None, key: tuple[str, int]) -> None:
        self.status, self.reason, self.headers, self.content = status, reason, headers, content
        kind = headers.get("Content-Type")
        self.content_type = kind.partition(";")[0].strip().lower() if kind else "application/octet-stream"
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None else None
        self._protocol: ResponseHandler | None = protocol
        self._pool, self._key = pool, key

    def close(self) -> None:
        """Back to the pool if the answer was read whole; else the connection is closed, which makes
        the runtime drop the generation and free its slot."""
        protocol, self._protocol = self._protocol, None
        if protocol is None:
            return
        pool = self._pool
        if (pool is not None and not pool.closed and self.content.is_eof() and self.content.exception() is None
                and not protocol.should_close and protocol.is_connected()):
            pool.put(self._key, protocol)
        else:
            protocol.close()


class RuntimePool:
    """Keep-alive connections to plain-HTTP runtimes, by host and port."""

    def __init__(self, keepalive_s: float) -> None:
        self.keepalive_s = keepalive_s
        self.closed = False
        self._idle: dict[tuple[str, int], list[tuple[float, ResponseHandler]]] = {}
        self._bases: dict[str, tuple[str, int, bytes]] = {}

    def put(self, key: tuple[str, int], protocol: ResponseHandler) -> None:
        self._idle.setdefault(key, []).append((time.monotonic(), protocol))

    def _take(self, key: tuple[str, int]) -> ResponseHandler | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        fresh_since = time.monotonic() - self.keepalive_s
        while idle:
            since, protocol = idle.pop()  # the most recent first: the least likely to be closing
            if since > fresh_since and protocol.is_connected():
                return protocol
            protocol.close()
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
        protocol = None if fresh else self._take(key)
        if protocol is None:
            protocol = await _connect(host, port)
        lines = [f"{method} {path_qs} HTTP/1.1\r\nHost: ".encode(), host_header, b"\r\n"]
        for name, value in headers:
            lines.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
        if body or method not in _NO_BODY_METHODS:
            lines.append(f"Content-Length: {len(body)}\r\n".encode())
        lines.append(b"\r\n")
        lines.append(body)
        try:
            protocol.set_response_params(skip_payload=method == "HEAD", read_until_eof=True, auto_decompress=False)
            assert protocol.transport is not None
            protocol.transport.write(b"".join(lines))
            message, payload = await protocol.read()
        except HttpProcessingError as exc:
            protocol.close()
            raise BadAnswer(f"a malformed header or status line from {host}:{port}: {exc.message}") from None
        except BaseException:
            protocol.close()
            raise
        return Answer(message.code, message.reason, message.headers, payload, protocol, None if fresh else self, key)

    def close(self) -> None:
        self.closed = True
        for idle in self._idle.values():
            for _since, protocol in idle:
                protocol.close()
        self._idle.clear()


async def _connect(host: str, port: int) -> ResponseHandler:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _transport, protocol = await loop.create_connection(lambda: ResponseHandler(loop), host, port)
    except TimeoutError as exc:
        raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host http://{host}:{port}") from exc
    except OSError as exc:
        raise aiohttp.ClientOSError(exc.errno, f"Cannot connect to host {host}:{port} [{exc.strerror or exc}]") from exc
    return protocol
