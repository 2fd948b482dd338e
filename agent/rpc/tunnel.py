"""Bytes between a WebSocket and a TCP connection, both ways, until either side ends.

The helper's tunnel route (``agent.rpc.api``) and the main node's forwards (``agent.rpc.forwards``)
both carry llama.cpp's RPC stream this way: every read from the TCP side goes out as one binary
frame (at most ``CHUNK`` bytes), every binary frame received is written to the TCP side. Either
side closing, a text frame or an error ends both.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Protocol

import aiohttp

CHUNK = 1024 * 1024
MAX_FRAME = 4 * CHUNK  # what a receiver accepts; a sender never sends more than CHUNK
# Both ends ping: a vanished peer ends the tunnel within about twice this, so the helper's
# rpc-server (one client at a time) is freed and the main's llama-server sees its RPC fail.
HEARTBEAT_S = 20.0


class FrameSocket(Protocol):
    """What both aiohttp WebSocket ends have in common, as used here."""

    def __aiter__(self) -> FrameSocket: ...
    async def __anext__(self) -> aiohttp.WSMessage: ...
    async def send_bytes(self, data: bytes) -> None: ...
    async def close(self) -> bool: ...


async def _frames_to_tcp(ws: FrameSocket, writer: asyncio.StreamWriter) -> None:
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.BINARY:
            return
        writer.write(msg.data)
        await writer.drain()


async def _tcp_to_frames(reader: asyncio.StreamReader, ws: FrameSocket) -> None:
    while True:
        data = await reader.read(CHUNK)
        if not data:
            return
        await ws.send_bytes(data)


def no_delay(writer: asyncio.StreamWriter) -> None:
    """Turn Nagle off on the TCP side. asyncio does so itself only for a socket made with proto
    IPPROTO_TCP, which an accepted connection of a listener made with proto 0 is not; with Nagle on,
    a reply written in two pieces (llama.cpp's 8-byte size, then the data) waits for the reader's
    delayed ACK, about 40 ms, on every synchronous RPC call."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def pipe(ws: FrameSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Carry bytes both ways until one direction ends; then close both ends."""
    no_delay(writer)
    tasks = [asyncio.ensure_future(_frames_to_tcp(ws, writer)), asyncio.ensure_future(_tcp_to_frames(reader, ws))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError, aiohttp.ClientError):
                await task
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
        with contextlib.suppress(ConnectionError, OSError, aiohttp.ClientError):
            await ws.close()
