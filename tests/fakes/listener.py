"""A TCP listener that counts who connects: the proof that a refused download never dialled out.

It answers any HTTP request with a tiny 200 (or a redirect, when told) so that a positive control
can show the counting works; the SSRF tests assert ``connections == 0``.
"""

from __future__ import annotations

import asyncio
import logging
import socket

_LOGGER = logging.getLogger(__name__)


class CountingListener:
    def __init__(self, host: str = "127.0.0.1", redirect_to: str | None = None, body: bytes = b"ok") -> None:
        self.host = host
        self.port = 0
        self.connections = 0
        self.redirect_to = redirect_to
        self.body = body
        self._server: asyncio.AbstractServer | None = None

    async def start(self, port: int = 0) -> CountingListener:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._server = await asyncio.start_server(self._handle, self.host, port, family=family)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            if self.redirect_to:
                head = f"HTTP/1.1 302 Found\r\nLocation: {self.redirect_to}\r\nContent-Length: 0\r\n\r\n"
                writer.write(head.encode())
            else:
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(self.body)}\r\n\r\n"
                writer.write(head.encode() + self.body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
