"""The relay's lean client (core.runtime_http) against a runtime that answers raw HTTP/1.1 bytes:
framings split at every byte, keep-alive reuse, and the failures the relay tells apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest

from core.runtime_http import RuntimePool

Answerer = Callable[[bytes], list[bytes] | None]  # the request's bytes -> the pieces to write (None: hang up)


@asynccontextmanager
async def raw_runtime(answer: Answerer) -> AsyncIterator[tuple[str, list[int]]]:
    """A server that writes ``answer(request)`` piece by piece (draining each); yields its base URL
    and the port of the client's connection for each request (a reused connection repeats one)."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                seen.append(writer.get_extra_info("peername")[1])
                pieces = answer(request)
                if pieces is None:
                    break
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
                head = b"".join(pieces).split(b"\r\n\r\n")[0].lower()
                if (b"content-length" not in head and b"chunked" not in head) or b"cut" in request:
                    break  # an answer that ends with its connection, or is cut short by its end
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen
    finally:
        server.close()


def bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


SSE = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in SSE) + b"0\r\nX-Trailer: t\r\n\r\n")


async def read_all(pool: RuntimePool, base: str, body: bytes = b"{}") -> tuple[int, str, bytes]:
    answer = await pool.request("POST", base, "/v1/chat/completions", [("X-Request-Id", "r1")], body)
    try:
        data = b""
        while chunk := await answer.content.readany():
            data += chunk
        return answer.status, answer.content_type, data
    finally:
        answer.close()


@pytest.mark.parametrize("split", [lambda d: [d], bytewise], ids=["whole", "bytewise"])
async def test_a_chunked_stream_comes_whole_however_it_is_split_and_its_connection_is_reused(split: Callable[
        [bytes], list[bytes]]) -> None:
    async with raw_runtime(lambda _request: split(CHUNKED)) as (base, seen):
        pool = RuntimePool(3.0)
        try:
            for _ in range(2):
                assert await read_all(pool, base) == (200, "text/event-stream", b"".join(SSE))
        finally:
            pool.close()
    assert len(seen) == 2 and seen[0] == seen[1]  # one connection for both


async def test_content_length_and_until_close_bodies() -> None:
    def answer(request: bytes) -> list[bytes]:
        if b"until-close" in request:
            return [b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\n\r\n", b'{"error": ', b'"x"}']
        return bytewise(b'HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nContent-Type: application/json\r\n\r\n{"a": 1}\n')

    async with raw_runtime(answer) as (base, seen):
        pool = RuntimePool(3.0)
        try:
            assert await read_all(pool, base) == (404, "application/json", b'{"a": 1}\n')
            answer_ = await pool.request("POST", base, "/v1/x", [], b"until-close")
            assert (answer_.status, answer_.reason) == (500, "Oops")
            assert await answer_.content.read() == b'{"error": "x"}'  # read whole up to the close
            answer_.close()
        finally:
            pool.close()
    assert seen[0] == seen[1]  # the length-delimited answer left its connection reusable


async def test_a_hang_up_before_the_headers_and_a_body_cut_short_raise_what_the_relay_tells_apart() -> None:
    def answer(request: bytes) -> list[bytes] | None:
        if b"cut" in request:
            return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"10\r\ndata: partial"]
        return None

    async with raw_runtime(answer) as (base, _seen):
        pool = RuntimePool(3.0)
        try:
            with pytest.raises(aiohttp.ServerDisconnectedError):  # nothing of the answer: retried
                await pool.request("POST", base, "/v1/x", [], b"hang up")
            cut = await pool.request("POST", base, "/v1/x", [], b"cut", fresh=True)
            with pytest.raises(aiohttp.ClientPayloadError):  # the relay's broken-stream event
                while await cut.content.readany():
                    pass
            cut.close()
        finally:
            pool.close()


async def test_a_malformed_answer_is_a_client_error_and_a_refused_connect_an_os_error() -> None:
    async with raw_runtime(lambda _request: [b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"]) as (base, _seen):
        pool = RuntimePool(3.0)
        try:
            with pytest.raises(aiohttp.ClientError, match="malformed header"):
                await pool.request("GET", base, "/v1/models", [], b"")
        finally:
            pool.close()
    with pytest.raises(aiohttp.ClientOSError):  # the server is gone: refused, which the relay retries
        await RuntimePool(3.0).request("GET", base, "/v1/models", [], b"")
