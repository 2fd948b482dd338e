"""The tunnel's TCP side (agent.rpc.tunnel.pipe): Nagle off on the connection to llama.cpp.

llama.cpp answers a synchronous RPC call in two writes (the 8-byte size, then the data) and waits
for both; with Nagle on, the second waits for the reader's delayed ACK (about 40 ms a call). asyncio
turns Nagle off only on a socket made with proto IPPROTO_TCP, and the main node's forwards listen
on a socket made with proto 0 (as here), so the pipe turns it off itself.
"""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from agent.rpc.tunnel import pipe
from tests.agent._support import eventually


class FakeFrames:
    """One WebSocket end: hands out the frames given, then waits until closed; keeps what is sent."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = list(frames)
        self.sent: list[bytes] = []
        self.closed = asyncio.Event()

    def __aiter__(self) -> FakeFrames:
        return self

    async def __anext__(self) -> aiohttp.WSMessage:
        if self.frames:
            return aiohttp.WSMessage(aiohttp.WSMsgType.BINARY, self.frames.pop(0), None)
        await self.closed.wait()
        raise StopAsyncIteration

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self) -> bool:
        self.closed.set()
        return True


def nodelay(sock: socket.socket | asyncio.trsock.TransportSocket) -> int:
    return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def test_the_pipe_turns_nagle_off_on_a_connection_accepted_from_a_proto_0_listener() -> None:
    reply = (8).to_bytes(8, "little") + b"12345678"
    frames = FakeFrames([reply[:8], reply[8:]])  # as llama.cpp writes it: size, then data
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, like the forwards'
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    before: list[int] = []
    accepted: list[asyncio.trsock.TransportSocket] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("socket"))
        before.append(nodelay(accepted[0]))
        await pipe(frames, reader, writer)

    server = await asyncio.start_server(handle, sock=listener)
    try:
        reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        got = await asyncio.wait_for(reader.readexactly(len(reply)), 10)
        during = nodelay(accepted[0])  # the pipe is carrying now
        writer.write(b"\x01request")
        await writer.drain()
        await eventually(lambda: frames.sent, what="the request sent on as a frame")
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    assert got == reply
    assert b"".join(frames.sent) == b"\x01request"
    assert before == [0], "asyncio left Nagle on for this socket: the test no longer shows the case"
    assert during == 1
