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
    POST /trust                           -> TrustInstalled  # body: TrustUpdate; CA rotation (agent.api.trust)
    POST /upgrade                         -> AgentUpgradeAnswer  # ?platform=&version=&size=&sha256=; body: the build; then exit 75
    POST /runtimes/llamacpp               -> LlamaCppBuildAnswer  # ?name=&version=&size=&sha256=&smoke_model=; body: tar.gz
    POST /fit                             -> FitReport       # body: FitRequest (a local path or an HF file)
    POST /plan                            -> NodePlan        # body: FitRequest; every way it runs here (agent.api.plan)
    POST /downloads                       -> TransferInfo    # body: DownloadRequest; 202
    GET  /imports/ollama                  -> list[OllamaModelInfo]  # ?store=PATH
    POST /imports/ollama                  -> TransferInfo    # body: OllamaImportRequest; 202
    POST /imports/folder                  -> TransferInfo    # body: FolderImportRequest; 202
    GET  /imports/lmstudio                -> list[LmStudioModelInfo]  # ?folder=PATH; GGUFs in LM Studio's folders
    POST /imports/lmstudio                -> TransferInfo    # body: LmStudioImportRequest; 202
    GET  /transfers                       -> TransfersPage   # ?since=VERSION&timeout=S (long-poll)
    GET  /transfers/{id}                  -> TransferInfo
    POST /transfers/{id}/cancel           -> TransferInfo
    POST /transfers/{id}/pause            -> TransferInfo    # a download; its partial files kept
    POST /transfers/{id}/resume           -> TransferInfo    # a paused, failed or cancelled download again
    GET    /files                         -> NodeFiles       # the models folder's files, the disk's space (agent.api.files)
    DELETE /files                         -> FileRemoved     # ?path=P; a file under the models folder, not in use
    GET  /services                        -> ServicesList    # ?all=0|1&allow=NAME&protect=NAME (agent.api.services)
    POST /services/{name}/{action}        -> ServiceActionResult  # start|stop|restart; body: ServiceActionRequest
    POST   /rpc/servers                   -> RpcServerInfo   # body: RpcServerRequest; 201 (agent.api.rpc)
    GET    /rpc/servers                   -> RpcServersPage
    GET    /rpc/servers/{grant}           -> RpcServerInfo
    DELETE /rpc/servers/{grant}           -> RpcServerInfo   # stopped; the grant is closed
    GET    /rpc/{grant}/tunnel            -> WebSocket       # the grant's peer agent only

An unpaired agent answers only the pairing routes; see ``agent.api.pairing``.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from multidict import MultiDict

from agent.api.files import FILES_PATH, FileRemoved, NodeFiles
from agent.api.models import (
    API_PREFIX,
    AgentStatus,
    InstanceInfo,
    InstancesPage,
    LaunchSpec,
    TelemetryPage,
)
from agent.api.plan import NodePlan
from agent.api.rpc import (
    RPC_SERVERS_PATH,
    RpcServerInfo,
    RpcServerRequest,
    RpcServersPage,
    rpc_server_path,
)
from agent.api.runtime_builds import (
    RUNTIME_BUILD_PATH,
    LlamaCppBuildAnswer,
    LlamaCppBuildOffer,
)
from agent.api.services import (
    ServiceAction,
    ServiceActionRequest,
    ServiceActionResult,
    ServicesList,
)
from agent.api.sources import (
    DownloadRequest,
    FitReport,
    FitRequest,
    FolderImportRequest,
    LmStudioImportRequest,
    LmStudioModelInfo,
    OllamaImportRequest,
    OllamaModelInfo,
    TransferInfo,
    TransfersPage,
)
from agent.api.trust import TRUST_PATH, TrustInstalled, TrustUpdate
from agent.api.upgrade import AgentUpgradeAnswer, AgentUpgradeOffer
from core.http import ErrorMap, JsonHttp, error_envelope, iter_sse_data

__all__ = ["AgentClient", "AgentError", "iter_sse_data"]

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


def agent_errors(base_url: str) -> ErrorMap:
    """``AgentError`` for each way a call to the agent at ``base_url`` can fail."""
    return ErrorMap(answered=_error_from,
                    unreachable=lambda exc: AgentError(0, "unreachable", f"{base_url}: {exc}"),
                    timed_out=lambda: AgentError(0, "timeout", f"{base_url}: no answer in time"))


class AgentClient:
    """Typed client for one agent. ``ssl_context`` carries our client certificate."""

    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | None,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False
        self._http = JsonHttp(self.base_url, agent_errors(self.base_url), prefix=API_PREFIX, session=session,
                              new_session=self._new_session, ssl=self._ssl, connect_s=10,
                              call_timeout=_CALL_TIMEOUT, poll_grace_s=30)

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(ssl=self._ssl, limit=0, keepalive_timeout=60)
        return aiohttp.ClientSession(connector=connector)

    @property
    def session(self) -> aiohttp.ClientSession:
        return self._http.session

    @property
    def ssl(self) -> ssl.SSLContext | bool:
        """What this client's connections use: its mutual-TLS context, or False for plain HTTP."""
        return self._ssl

    async def close(self) -> None:
        await self._http.close()

    def url(self, path: str) -> str:
        return self._http.url(path)

    def proxy_url(self, instance_id: str, path: str) -> str:
        """Where to send a runtime request through the agent (``path`` starts with ``/v1/``)."""
        return self.url(f"/proxy/{instance_id}{path}")

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: Any = None, timeout: aiohttp.ClientTimeout = _CALL_TIMEOUT) -> Any:
        return await self._http.call(method, path, params=params, body=body, timeout=timeout)

    async def status(self) -> AgentStatus:
        return AgentStatus.model_validate(await self._call("GET", "/status"))

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        return InstancesPage.model_validate(await self._http.poll("/instances", since, timeout))

    async def instance(self, instance_id: str) -> InstanceInfo:
        return InstanceInfo.model_validate(await self._call("GET", f"/instances/{instance_id}"))

    async def start(self, spec: LaunchSpec) -> InstanceInfo:
        data = await self._call("POST", "/instances", body=spec.model_dump(mode="json"))
        return InstanceInfo.model_validate(data)

    async def stop(self, instance_id: str, timeout: float = 10.0) -> InstanceInfo:
        data = await self._call("POST", f"/instances/{instance_id}/stop",
                                params={"timeout": timeout}, timeout=self._http.timeout(timeout + 30))
        return InstanceInfo.model_validate(data)

    async def telemetry(self, since: int = 0) -> TelemetryPage:
        return TelemetryPage.model_validate(await self._call("GET", "/telemetry", params={"since": since}))

    async def unpair(self) -> None:
        """Tell the agent its node was removed: it resets its identity and waits to be paired again."""
        await self._call("POST", "/unpair", timeout=aiohttp.ClientTimeout(total=10, connect=5))

    async def install_trust(self, update: TrustUpdate) -> TrustInstalled:
        """Hand the agent the CAs it trusts, its certificate and the daemon's pins (CA rotation)."""
        data = await self._call("POST", TRUST_PATH, body=update.model_dump(mode="json"),
                                timeout=aiohttp.ClientTimeout(total=15, connect=5))
        return TrustInstalled.model_validate(data)

    async def upgrade(self, offer: AgentUpgradeOffer, build: Path) -> AgentUpgradeAnswer:
        """Push the agent build at ``build`` to the agent; it verifies it against ``offer``, swaps it in,
        answers, then exits 75 to be started again by its service manager."""
        params = {k: str(v) for k, v in offer.model_dump().items()}
        with build.open("rb") as body:
            text = await self._http.text("POST", "/upgrade", params=params, data=body,
                                         headers={"Content-Type": "application/octet-stream"},
                                         # a .deb's agent answers once apt has installed the package
                                         timeout=self._http.timeout(None, sock_read=900))
        return AgentUpgradeAnswer.model_validate_json(text)

    async def runtime_build(self, offer: LlamaCppBuildOffer, archive: Path,
                            smoke_timeout_s: float = 300.0) -> LlamaCppBuildAnswer:
        """Push a llama.cpp build (``archive``: the build folder as tar.gz) to the agent; it verifies,
        unpacks it beside its current build, smoke-tests it and only then prefers it."""
        params = {k: str(v) for k, v in offer.model_dump().items()}
        with archive.open("rb") as body:
            text = await self._http.text("POST", RUNTIME_BUILD_PATH, params=params, data=body,
                                         headers={"Content-Type": "application/octet-stream"},
                                         timeout=self._http.timeout(None, sock_read=smoke_timeout_s))
        return LlamaCppBuildAnswer.model_validate_json(text)

    async def fit(self, request: FitRequest) -> FitReport:
        """Will this model fit this node? Reads a Hugging Face file's header by ranges, nothing more."""
        data = await self._call("POST", "/fit", body=request.model_dump(mode="json"), timeout=_SLOW_CALL_TIMEOUT)
        return FitReport.model_validate(data)

    async def plan(self, request: FitRequest) -> NodePlan:
        """Every way this model runs on this node: each GPU, split, partly offloaded, the CPU."""
        data = await self._call("POST", "/plan", body=request.model_dump(mode="json"), timeout=_SLOW_CALL_TIMEOUT)
        return NodePlan.model_validate(data)

    async def download(self, request: DownloadRequest) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("POST", "/downloads", body=request.model_dump(mode="json")))

    async def ollama_models(self, store: str | None = None) -> list[OllamaModelInfo]:
        data = await self._call("GET", "/imports/ollama", params={"store": store} if store else None)
        return [OllamaModelInfo.model_validate(m) for m in data]

    async def lmstudio_models(self, folder: str | None = None) -> list[LmStudioModelInfo]:
        data = await self._call("GET", "/imports/lmstudio", params={"folder": folder} if folder else None)
        return [LmStudioModelInfo.model_validate(m) for m in data]

    async def import_lmstudio(self, request: LmStudioImportRequest) -> TransferInfo:
        data = await self._call("POST", "/imports/lmstudio", body=request.model_dump(mode="json"))
        return TransferInfo.model_validate(data)

    async def import_ollama(self, request: OllamaImportRequest) -> TransferInfo:
        data = await self._call("POST", "/imports/ollama", body=request.model_dump(mode="json"))
        return TransferInfo.model_validate(data)

    async def import_folder(self, request: FolderImportRequest) -> TransferInfo:
        data = await self._call("POST", "/imports/folder", body=request.model_dump(mode="json"))
        return TransferInfo.model_validate(data)

    async def transfers(self, since: int | None = None, timeout: float = 0) -> TransfersPage:
        return TransfersPage.model_validate(await self._http.poll("/transfers", since, timeout))

    async def transfer(self, transfer_id: str) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("GET", f"/transfers/{transfer_id}"))

    async def cancel_transfer(self, transfer_id: str) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("POST", f"/transfers/{transfer_id}/cancel"))

    async def pause_transfer(self, transfer_id: str) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("POST", f"/transfers/{transfer_id}/pause"))

    async def resume_transfer(self, transfer_id: str) -> TransferInfo:
        return TransferInfo.model_validate(await self._call("POST", f"/transfers/{transfer_id}/resume"))

    async def files(self) -> NodeFiles:
        """Every file under the node's models folder, and the free and total bytes of its disk."""
        return NodeFiles.model_validate(await self._call("GET", FILES_PATH))

    async def remove_file(self, path: str) -> FileRemoved:
        """Remove one file under the models folder (refused: outside it, a link out, a folder, in use)."""
        return FileRemoved.model_validate(await self._call("DELETE", FILES_PATH, params={"path": path}))

    async def start_rpc_server(self, request: RpcServerRequest) -> RpcServerInfo:
        """Start ggml-rpc-server on this (helper) node for a grant; answers once it listens on loopback."""
        data = await self._call("POST", RPC_SERVERS_PATH, body=request.model_dump(mode="json"))
        return RpcServerInfo.model_validate(data)

    async def stop_rpc_server(self, grant_id: str) -> RpcServerInfo:
        """Stop a grant's rpc-server and close the grant (its tunnels too); 404 when none is known."""
        return RpcServerInfo.model_validate(await self._call("DELETE", rpc_server_path(grant_id)))

    async def rpc_servers(self) -> list[RpcServerInfo]:
        return RpcServersPage.model_validate(await self._call("GET", RPC_SERVERS_PATH)).servers

    async def rpc_server(self, grant_id: str) -> RpcServerInfo:
        return RpcServerInfo.model_validate(await self._call("GET", rpc_server_path(grant_id)))

    async def services(self, every: bool = False, allow: Sequence[str] = (),
                       protect: Sequence[str] = ()) -> ServicesList:
        """The node's whitelisted services (``every``: all it has), ``allow``/``protect`` added to its own."""
        params: MultiDict[str] = MultiDict([("all", str(int(every))), *(("allow", n) for n in allow),
                                            *(("protect", n) for n in protect)])
        return ServicesList.model_validate(await self._http.call("GET", "/services", params=params,
                                                                 timeout=_CALL_TIMEOUT))

    async def service_action(self, name: str, action: ServiceAction,
                             request: ServiceActionRequest) -> ServiceActionResult:
        """Start, stop or restart a service; the agent's policy decides (403 service_* codes)."""
        path = f"/services/{urllib.parse.quote(name, safe='@:+')}/{action}"
        data = await self._call("POST", path, body=request.model_dump(mode="json"),
                                timeout=aiohttp.ClientTimeout(total=150, connect=10))
        return ServiceActionResult.model_validate(data)

    async def logs(self, instance_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]:
        """Log lines of an instance: the last ``tail`` lines, then new ones while ``follow``."""
        async for data in self._http.sse(f"/instances/{instance_id}/logs",
                                         params={"tail": tail, "follow": int(follow)}):
            yield json.loads(data)


def _error_from(status: int, text: str) -> AgentError:
    err = error_envelope(text)
    if err is None:
        return AgentError(status, "error", text[:500])
    details = err.get("details") if isinstance(err.get("details"), dict) else None
    return AgentError(status, str(err.get("code", "error")), str(err.get("message", text)), details)
