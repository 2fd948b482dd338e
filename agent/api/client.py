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
    POST /unpair                          -> 202             # forget the pairing; a new code is shown
    POST /upgrade                         -> AgentUpgradeAnswer  # ?platform=&version=&size=&sha256=; body: the build; then exit 75
    POST /fit                             -> FitReport       # body: FitRequest (a local path or an HF file)
    POST /downloads                       -> TransferInfo    # body: DownloadRequest; 202
    GET  /imports/ollama                  -> list[OllamaModelInfo]  # ?store=PATH
    POST /imports/ollama                  -> TransferInfo    # body: OllamaImportRequest; 202
    POST /imports/folder                  -> TransferInfo    # body: FolderImportRequest; 202
    GET  /imports/lmstudio                -> list[LmStudioModelInfo]  # GGUFs in LM Studio's models folders
    GET  /transfers                       -> TransfersPage   # ?since=VERSION&timeout=S (long-poll)
    GET  /transfers/{id}                  -> TransferInfo
    POST /transfers/{id}/cancel           -> TransferInfo

An unpaired agent answers only the pairing routes; see ``agent.api.pairing``.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
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
from agent.api.sources import (
    DownloadRequest,
    FitReport,
    FitRequest,
    FolderImportRequest,
    LmStudioModelInfo,
    OllamaImportRequest,
    OllamaModelInfo,
    TransferInfo,
    TransfersPage,
)
from agent.api.upgrade import AgentUpgradeAnswer, AgentUpgradeOffer

_LOGGER = logging.getLogger(__name__)

_CALL_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=10)
_SLOW_CALL_TIMEOUT = aiohttp.ClientTimeout(total=180, connect=10)  # a fit may read a remote header


class AgentError(Exception):
    """An agent answered with an error envelope, or could not be reached."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"agent {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


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

    @property
    def ssl(self) -> ssl.SSLContext | bool:
        """What this client's connections use: its mutual-TLS context, or False for plain HTTP."""
        return self._ssl

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

    async def unpair(self) -> None:
        """Tell the agent its node was removed: it resets its identity and waits to be paired again."""
        await self._call("POST", "/unpair", timeout=aiohttp.ClientTimeout(total=10, connect=5))

    async def upgrade(self, offer: AgentUpgradeOffer, build: Path) -> AgentUpgradeAnswer:
        """Push the agent build at ``build`` to the agent; it verifies it against ``offer``, swaps it in,
        answers, then exits 75 to be started again by its service manager."""
        params = {k: str(v) for k, v in offer.model_dump().items()}
        timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=120)
        try:
            with build.open("rb") as body:
                async with self.session.post(self.url("/upgrade"), params=params, data=body, ssl=self._ssl,
                                             headers={"Content-Type": "application/octet-stream"},
                                             timeout=timeout) as resp:
                    text = await resp.text()
                    if resp.status >= 400:
                        raise _error_from(resp.status, text)
                    return AgentUpgradeAnswer.model_validate_json(text)
        except aiohttp.ClientError as exc:
            raise AgentError(0, "unreachable", f"{self.base_url}: {exc}") from exc
        except TimeoutError as exc:
            raise AgentError(0, "timeout", f"{self.base_url}: no answer in time") from exc

    async def fit(self, request: FitRequest) -> FitReport:
        """Will this model fit this node? Reads a Hugging Face file's header by ranges, nothing more."""
        data = await self._call("POST", "/fit", body=request.model_dump(mode="json"), timeout=_SLOW_CALL_TIMEOUT)
        return FitReport.model_validate(data)

    async def download(self, request: DownloadRequest) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("POST", "/downloads", body=request.model_dump(mode="json")))

    async def ollama_models(self, store: str | None = None) -> list[OllamaModelInfo]:
        data = await self._call("GET", "/imports/ollama", params={"store": store} if store else None)
        return [OllamaModelInfo.model_validate(m) for m in data]

    async def lmstudio_models(self) -> list[LmStudioModelInfo]:
        return [LmStudioModelInfo.model_validate(m) for m in await self._call("GET", "/imports/lmstudio")]

    async def import_ollama(self, request: OllamaImportRequest) -> TransferInfo:
        data = await self._call("POST", "/imports/ollama", body=request.model_dump(mode="json"))
        return TransferInfo.model_validate(data)

    async def import_folder(self, request: FolderImportRequest) -> TransferInfo:
        data = await self._call("POST", "/imports/folder", body=request.model_dump(mode="json"))
        return TransferInfo.model_validate(data)

    async def transfers(self, since: int | None = None, timeout: float = 0) -> TransfersPage:
        params: dict[str, Any] = {} if since is None else {"since": since, "timeout": timeout}
        call_timeout = aiohttp.ClientTimeout(total=timeout + 30, connect=10)
        return TransfersPage.model_validate(await self._call("GET", "/transfers", params=params, timeout=call_timeout))

    async def transfer(self, transfer_id: str) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("GET", f"/transfers/{transfer_id}"))

    async def cancel_transfer(self, transfer_id: str) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("POST", f"/transfers/{transfer_id}/cancel"))

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
        details = err.get("details") if isinstance(err.get("details"), dict) else None
        return AgentError(status, str(err.get("code", "error")), str(err.get("message", text)), details)
    except (ValueError, KeyError, TypeError):
        return AgentError(status, "error", text[:500])
