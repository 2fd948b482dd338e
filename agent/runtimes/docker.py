"""A small Docker Engine API client over the engine's Unix socket (aiohttp's ``UnixConnector``).

Only what the container driver (``agent.runtimes.vllm``) uses: containers listed by label,
create, start, inspect, logs (followed), wait, stop, delete; image inspect and pull (its progress
is streamed JSON lines); the engine's version. The API version is pinned (``API_VERSION``) and
negotiated down to the engine's own when the engine is older, as the docker CLI does; an engine
that no longer speaks it is refused with both versions named.

Every refusal of the engine is a ``DockerError`` carrying Docker's own message and HTTP status;
an engine that cannot be reached at all is a ``DockerUnavailable`` (no socket, no permission).
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

_LOGGER = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/run/docker.sock"
API_VERSION = "1.43"  # Docker 24; older engines are spoken to in their own (>= MIN_API_VERSION)
MIN_API_VERSION = "1.41"  # Docker 20.10 (Debian 12's docker.io)
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, connect=5)
STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5, sock_read=None)
_HEADER = struct.Struct(">BxxxL")  # a multiplexed log frame: stream (1 stdout, 2 stderr), size


class DockerError(Exception):
    """The engine refused a request; ``str()`` is Docker's message, ``status`` its HTTP status."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class DockerUnavailable(DockerError):
    """No engine answers on the socket (missing, refused, not permitted)."""


class NotFound(DockerError):
    """No such container or image (HTTP 404)."""


def _version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (0,)


def negotiate(server_api: str, server_min: str | None = None) -> str:
    """The API version to speak: ours, or the engine's when it is older (never below MIN)."""
    if _version_tuple(server_api) < _version_tuple(MIN_API_VERSION):
        raise DockerError(f"the Docker engine speaks API {server_api}; MirbadLLM needs {MIN_API_VERSION} or newer")
    if server_min is not None and _version_tuple(server_min) > _version_tuple(API_VERSION):
        raise DockerError(f"the Docker engine needs API {server_min} or newer; MirbadLLM speaks {API_VERSION}")
    return min(API_VERSION, server_api, key=_version_tuple)


def split_image(reference: str) -> tuple[str, str]:
    """``name[:tag]`` / ``name@digest`` as ``(fromImage, tag)`` for a pull (tag ``latest`` when none)."""
    if "@" in reference:
        name, digest = reference.split("@", 1)
        return name, digest
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > slash:
        return reference[:colon], reference[colon + 1:]
    return reference, "latest"


def demux(buffer: bytearray) -> list[bytes]:
    """Take the complete frames of Docker's multiplexed log stream off ``buffer``; their payloads."""
    payloads: list[bytes] = []
    while len(buffer) >= _HEADER.size:
        _, size = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + size:
            break
        payloads.append(bytes(buffer[_HEADER.size:_HEADER.size + size]))
        del buffer[:_HEADER.size + size]
    return payloads


class DockerClient:
    """One engine, reached through ``socket``; one aiohttp session, opened on first use."""

    def __init__(self, socket: str = DEFAULT_SOCKET) -> None:
        self.socket = socket
        self._session: aiohttp.ClientSession | None = None
        self._api: str | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=self.socket),
                                                  base_url="http://docker")
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _prefix(self) -> str:
        if self._api is None:
            raw = await self._request("GET", "/version", versioned=False)
            self._api = negotiate(str(raw.get("ApiVersion", "")), raw.get("MinAPIVersion"))
        return f"/v{self._api}"

    async def _url(self, path: str, versioned: bool) -> str:
        return (await self._prefix() if versioned else "") + path

    async def _request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                       body: Any = None, versioned: bool = True,
                       timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT) -> Any:
        url = await self._url(path, versioned)
        try:
            async with self._client().request(method, url, params=params, json=body, timeout=timeout) as resp:
                data = await resp.read()
                if resp.status >= 400:
                    raise _error(resp.status, data)
                if not data:
                    return {}
                try:
                    return json.loads(data)
                except ValueError:
                    return {"text": data.decode("utf-8", "replace")}
        except aiohttp.ClientConnectorError as exc:
            raise DockerUnavailable(f"no Docker engine answers on {self.socket}: {exc.os_error}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DockerError(f"the Docker engine on {self.socket} did not answer: {exc!r}") from exc

    async def version(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/version", versioned=False)
        return result

    async def containers(self, label: str, all_states: bool = True) -> list[dict[str, Any]]:
        """Containers carrying ``label`` (``key`` or ``key=value``), running or not."""
        filters = json.dumps({"label": [label]})
        result: list[dict[str, Any]] = await self._request(
            "GET", "/containers/json", params={"all": "1" if all_states else "0", "filters": filters})
        return result

    async def create(self, name: str, body: Mapping[str, Any]) -> str:
        """Create container ``name``; its id."""
        result = await self._request("POST", "/containers/create", params={"name": name}, body=dict(body))
        return str(result["Id"])

    async def start(self, container: str) -> None:
        await self._request("POST", f"/containers/{quote(container)}/start")

    async def inspect(self, container: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", f"/containers/{quote(container)}/json")
        return result

    async def wait(self, container: str) -> int:
        """Wait until the container stops; its exit code."""
        result = await self._request("POST", f"/containers/{quote(container)}/wait",
                                     params={"condition": "not-running"}, timeout=STREAM_TIMEOUT)
        return int(result.get("StatusCode", -1))

    async def stop(self, container: str, timeout_s: int = 30) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; a container already stopped is fine (304)."""
        await self._request("POST", f"/containers/{quote(container)}/stop", params={"t": str(timeout_s)},
                            timeout=aiohttp.ClientTimeout(total=timeout_s + 30, connect=5))

    async def delete(self, container: str, force: bool = False) -> None:
        await self._request("DELETE", f"/containers/{quote(container)}",
                            params={"force": "1" if force else "0"})

    async def logs(self, container: str, *, follow: bool = True, tail: str = "all") -> AsyncIterator[bytes]:
        """The container's output (stdout and stderr, in order) as byte chunks; with ``follow``,
        until it stops. Ours have no TTY, so the engine multiplexes the two streams (whatever
        Content-Type older engines call it): the frames are taken apart here."""
        url = await self._url(f"/containers/{quote(container)}/logs", True)
        params = {"stdout": "1", "stderr": "1", "follow": "1" if follow else "0", "tail": tail}
        try:
            async with self._client().get(url, params=params, timeout=STREAM_TIMEOUT) as resp:
                if resp.status >= 400:
                    raise _error(resp.status, await resp.read())
                buffer = bytearray()
                async for chunk in resp.content.iter_any():
                    buffer.extend(chunk)
                    for payload in demux(buffer):
                        yield payload
        except aiohttp.ClientConnectorError as exc:
            raise DockerUnavailable(f"no Docker engine answers on {self.socket}: {exc.os_error}") from exc
        except aiohttp.ClientError as exc:
            raise DockerError(f"the Docker engine on {self.socket} broke the log stream: {exc!r}") from exc

    async def image(self, reference: str) -> dict[str, Any]:
        """``docker image inspect``; ``NotFound`` when the engine does not hold it."""
        result: dict[str, Any] = await self._request("GET", f"/images/{quote(reference, safe='/:@')}/json")
        return result

    async def pull(self, reference: str) -> AsyncIterator[dict[str, Any]]:
        """Pull ``reference``, yielding the engine's progress objects; a ``DockerError`` with the
        engine's message when the pull fails (even mid-stream, where Docker reports it as a line)."""
        name, tag = split_image(reference)
        url = await self._url("/images/create", True)
        try:
            async with self._client().post(url, params={"fromImage": name, "tag": tag},
                                           timeout=STREAM_TIMEOUT) as resp:
                if resp.status >= 400:
                    raise _error(resp.status, await resp.read())
                async for line in resp.content:
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(item, dict) and item.get("error"):
                        raise DockerError(str(item.get("error")), 500)
                    if isinstance(item, dict):
                        yield item
        except aiohttp.ClientConnectorError as exc:
            raise DockerUnavailable(f"no Docker engine answers on {self.socket}: {exc.os_error}") from exc
        except aiohttp.ClientError as exc:
            raise DockerError(f"the Docker engine on {self.socket} broke the pull: {exc!r}") from exc


def _error(status: int, data: bytes) -> DockerError:
    try:
        message = str(json.loads(data).get("message") or "")
    except (ValueError, AttributeError):
        message = data.decode("utf-8", "replace").strip()
    message = message or f"HTTP {status}"
    return NotFound(message, status) if status == 404 else DockerError(message, status)
