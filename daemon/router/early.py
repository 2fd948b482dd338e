"""A streamed request's answer begun while its model queues or loads: heartbeats before the runtime.

A client that asked for a stream and waits on a start on request (a model loading for a minute) or
on a full queue would hit its own read timeout, or a proxy's, before the runtime's first byte.
``EarlyStream`` waits ``heartbeat_s`` (a quick answer or refusal keeps its own status), then gives
the client a 200 SSE answer and an SSE comment every ``heartbeat_s`` until the relay takes the
answer over (``core.relay``'s ``prepared``). A refusal after that point is the stream's one error
event, in the OpenAI shape, instead of an HTTP status (``end_with``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import web

from core.relay import HEARTBEAT
from daemon.errors import DaemonProblem, error_body


class EarlyStream:
    def __init__(self, request: web.Request, heartbeat_s: float) -> None:
        self.request = request
        self.heartbeat_s = heartbeat_s
        self.response: web.StreamResponse | None = None
        self.beats = 0
        self._sending: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # A timer, not a task, until the first beat: most streams never wait that long.
        self._timer = asyncio.get_running_loop().call_later(heartbeat_s, self._start)

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            # Shielded: a stop while the headers or a comment are being written waits for it whole.
            self._sending = asyncio.ensure_future(self._send())
            await asyncio.shield(self._sending)
            await asyncio.sleep(self.heartbeat_s)

    async def _send(self) -> None:
        if self.response is None:
            response = web.StreamResponse(status=200, headers={
                "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            await response.prepare(self.request)
            self.response = response
        await self.response.write(HEARTBEAT)
        self.beats += 1

    async def stop(self) -> web.StreamResponse | None:
        """No more heartbeats; the answer the client already has (None: nothing was sent yet)."""
        self._timer.cancel()
        if self._task is None:
            return self.response
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
            await self._task
        if self._sending is not None:
            with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                await self._sending
        return self.response

    async def end_with(self, problem: DaemonProblem) -> web.StreamResponse | None:
        """Say ``problem`` as the stream's one error event, if the client already has a 200 SSE
        answer; None when nothing was sent yet (the error is then answered with its own status)."""
        response = await self.stop()
        if response is None:
            return None
        event = error_body(problem.status, problem.code, problem.message, problem.type_)
        with contextlib.suppress(ConnectionResetError):
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
            await response.write_eof()
        return response
