"""``AgentClient``: the one typed way to talk to an agent over mutual TLS.

Route table (``/agent/v1``):

    GET  /status                          -> AgentStatus
    GET  /instances                       -> InstancesPage   # ?since=VERSION&timeout=S (long-poll)
    GET  /instances/{id}                  -> InstanceInfo
    POST /instances                       -> InstanceInfo    # body: LaunchSpec; 202, 409 when running
    POST /instances/{id}/stop             -> InstanceInfo    # ?timeout=S (SIGTERM, then SIGKILL)
    GET  /instances/{id}/logs             -> text/event-stream  # ?tail=N&follow=0|1
    GET  /telemetry                       -> TelemetryPage   # ?since=SEQ
    *    /proxy/{id}/{path}               -> the runtime's own answer, streamed
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agent.api.models import (
    API_PREFIX,
    AgentStatus,
    InstanceInfo,
    InstancesPage,
    LaunchSpec,
    TelemetryPage,
)

_LOGGER = logging.getLogger(__name__)

_CALL_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=10)


class AgentError(Exception):
    """An agent answered with an error envelope, or could not be reached."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"agent {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class AgentClient:
    """Typed client for one agent. ``ssl_context`` carries our client certificate."""

    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | None,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False
        self._own_session = session is None
        self._session = session

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=0, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    def url(self, path: str) -> str:
        return f"{self.base_url}{API_PREFIX}{path}"

    def proxy_url(self, instance_id: str, path: str) -> str:
        """Where to send a runtime request through the agent (``path`` starts with ``/v1/``)."""
        return self.url(f"/proxy/{instance_id}{path}")

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: Any = None, timeout: aiohttp.ClientTimeout = _CALL_TIMEOUT) -> Any:
        try:
            async with self.session.request(method, self.url(path), params=params, json=body,
                                            ssl=self._ssl, timeout=timeout) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise _error_from(resp.status, text)
                return json.loads(text) if text else None
        except aiohttp.ClientError as exc:
            raise AgentError(0, "unreachable", f"{self.base_url}: {exc}") from exc
        except TimeoutError as exc:
            raise AgentError(0, "timeout", f"{self.base_url}: no answer in time") from exc

    async def status(self) -> AgentStatus:
        return AgentStatus.model_validate(await self._call("GET", "/status"))

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        params: dict[str, Any] = {}
        if since is not None:
            params = {"since": since, "timeout": timeout}
        call_timeout = aiohttp.ClientTimeout(total=timeout + 30, connect=10)
        data = await self._call("GET", "/instances", params=params, timeout=call_timeout)
        return InstancesPage.model_validate(data)

    async def instance(self, instance_id: str) -> InstanceInfo:
        return InstanceInfo.model_validate(await self._call("GET", f"/instances/{instance_id}"))

    async def start(self, spec: LaunchSpec) -> InstanceInfo:
        data = await self._call("POST", "/instances", body=spec.model_dump(mode="json"))
        return InstanceInfo.model_validate(data)

    async def stop(self, instance_id: str, timeout: float = 10.0) -> InstanceInfo:
        call_timeout = aiohttp.ClientTimeout(total=timeout + 30, connect=10)
        data = await self._call("POST", f"/instances/{instance_id}/stop",
                                params={"timeout": timeout}, timeout=call_timeout)
        return InstanceInfo.model_validate(data)

    async def telemetry(self, since: int = 0) -> TelemetryPage:
        return TelemetryPage.model_validate(await self._call("GET", "/telemetry", params={"since": since}))

    async def logs(self, instance_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]:
        """Log lines of an instance: the last ``tail`` lines, then new ones while ``follow``."""
        params = {"tail": tail, "follow": int(follow)}
        timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=None)
        try:
            async with self.session.get(self.url(f"/instances/{instance_id}/logs"), params=params,
                                        ssl=self._ssl, timeout=timeout) as resp:
                if resp.status >= 400:
                    raise _error_from(resp.status, await resp.text())
                async for line in iter_sse_data(resp.content):
                    yield json.loads(line)
        except aiohttp.ClientError as exc:
            raise AgentError(0, "unreachable", f"{self.base_url}: {exc}") from exc


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


def _error_from(status: int, text: str) -> AgentError:
    try:
        err = json.loads(text)["error"]
        return AgentError(status, str(err.get("code", "error")), str(err.get("message", text)))
    except (ValueError, KeyError, TypeError):
        return AgentError(status, "error", text[:500])
