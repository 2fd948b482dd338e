"""``JsonHttp``: the HTTP plumbing the typed clients share (``AgentClient``, and the daemon's
``DaemonClient``, which may import ``agent.api``).

One instance holds a client's session (its own, made lazily by ``new_session``, or one it was
given and does not close), the headers and TLS setting every request carries, and how errors
become the client's own typed error (an ``ErrorMap``). It calls a route and decodes its JSON,
long-polls, and reads the ``data:`` payloads of a server-sent event stream. The clients keep
their routes and models; this module knows nothing of either API.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any

import aiohttp


@dataclass(frozen=True)
class ErrorMap:
    """How a client names what went wrong, as its own exception type."""

    answered: Callable[[int, str], Exception]  # the status and body of an answer >= 400
    unreachable: Callable[[aiohttp.ClientError], Exception]  # no answer: refused, reset, TLS
    timed_out: Callable[[], Exception]  # no answer in time


def error_envelope(text: str) -> dict[str, Any] | None:
    """The ``error`` object of an error body (``{"error": {"code", "message", ...}}``); None if it is not one."""
    try:
        err = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return err if isinstance(err, dict) else None


async def iter_sse_data(stream: aiohttp.StreamReader) -> AsyncIterator[str]:
    """The ``data:`` payloads of a server-sent event stream, one per event."""
    data: list[str] = []
    async for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


class JsonHttp:
    """One client's session, request and error plumbing against ``base_url`` + ``prefix``.

    ``ssl``: passed on every request when not None (so a session shared with others still uses
    this client's mutual-TLS context). ``connect_s``: the connect timeout of calls and polls;
    ``call_timeout``: a call's default; ``poll_grace_s``: how long past its own wait a long-poll
    may take to answer.
    """

    def __init__(self, base_url: str, errors: ErrorMap, *, prefix: str = "",
                 session: aiohttp.ClientSession | None = None,
                 new_session: Callable[[], aiohttp.ClientSession] = aiohttp.ClientSession,
                 ssl: SSLContext | bool | None = None, headers: Mapping[str, str] | None = None,
                 connect_s: float = 10.0, call_timeout: aiohttp.ClientTimeout | None = None,
                 poll_grace_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.prefix = prefix
        self.errors = errors
        self.ssl = ssl
        self.headers = dict(headers or {})
        self.connect_s = connect_s
        self.call_timeout = call_timeout or aiohttp.ClientTimeout(total=30, connect=connect_s)
        self.poll_grace_s = poll_grace_s
        self._new_session = new_session
        self._own_session = session is None
        self._session = session

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self._new_session()
        return self._session

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    def url(self, path: str) -> str:
        """The URL of ``path`` under this client's prefix; a ``.`` or ``..`` segment (also
        percent-encoded) would climb out of it and is never sent: the client's own error, 400
        ``invalid_path``."""
        segments = {urllib.parse.unquote(segment) for segment in path.split("?", 1)[0].split("/")}
        if "." in segments or ".." in segments:
            body = json.dumps({"error": {"code": "invalid_path", "type": "invalid_request_error",
                                         "message": f"a path with a dot segment is never sent: {path[:200]!r}"}})
            raise self.errors.answered(400, body)
        return f"{self.base_url}{self.prefix}{path}"

    def timeout(self, total: float | None, sock_read: float | None = None) -> aiohttp.ClientTimeout:
        """A timeout of ``total`` seconds (None: none) with this client's connect timeout."""
        return aiohttp.ClientTimeout(total=total, connect=self.connect_s, sock_read=sock_read)

    def _request_kwargs(self, headers: Mapping[str, str] | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"headers": {**self.headers, **(headers or {})}}
        if self.ssl is not None:
            kwargs["ssl"] = self.ssl
        return kwargs

    async def text(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None,
                   data: Any = None, headers: Mapping[str, str] | None = None,
                   timeout: aiohttp.ClientTimeout | None = None) -> str:
        """The body of a 2xx answer to ``method path``; the client's error for anything else.
        ``body`` goes as JSON, ``data`` as it is (a file, bytes)."""
        try:
            async with self.session.request(method, self.url(path), params=params, json=body, data=data,
                                            timeout=timeout or self.call_timeout,
                                            **self._request_kwargs(headers)) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise self.errors.answered(resp.status, text)
                return text
        except aiohttp.ClientError as exc:
            raise self.errors.unreachable(exc) from exc
        except TimeoutError as exc:
            raise self.errors.timed_out() from exc

    async def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None,
                   timeout: aiohttp.ClientTimeout | None = None) -> Any:
        """The decoded JSON of a 2xx answer (None for an empty body)."""
        text = await self.text(method, path, params=params, body=body, timeout=timeout)
        return json.loads(text) if text else None

    async def poll(self, path: str, since: int | None, wait: float) -> Any:
        """A long-poll: what changed after ``since``, waiting up to ``wait`` seconds for it
        (``since`` None: the current state at once, no wait)."""
        params = {} if since is None else {"since": since, "timeout": wait}
        return await self.call("GET", path, params=params, timeout=self.timeout(wait + self.poll_grace_s))

    async def sse(self, path: str, *, params: Mapping[str, Any] | None = None) -> AsyncIterator[str]:
        """The ``data:`` payloads of the event stream at ``path``, until it ends (no read timeout)."""
        try:
            async with self.session.get(self.url(path), params=params, timeout=self.timeout(None),
                                        **self._request_kwargs(None)) as resp:
                if resp.status >= 400:
                    raise self.errors.answered(resp.status, await resp.text())
                async for data in iter_sse_data(resp.content):
                    yield data
        except aiohttp.ClientError as exc:
            raise self.errors.unreachable(exc) from exc
        except TimeoutError as exc:
            raise self.errors.timed_out() from exc
