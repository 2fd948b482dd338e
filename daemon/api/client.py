"""``DaemonClient``: the typed client of the daemon's admin API, used by the app, the CLI and tests.

Route table (admin token as ``Authorization: Bearer``):

    GET    /api/status                      -> StatusResponse
    GET    /api/events                      -> EventsPage       # ?since=ID&timeout=S (long-poll)
    GET    /api/models                      -> list[ModelView]
    POST   /api/models                      -> ModelView        # body: ModelDefinition; 201, 409 on clash
    GET    /api/models/{id}                 -> ModelView
    PUT    /api/models/{id}                 -> ModelView        # body: ModelDefinition
    DELETE /api/models/{id}                 -> 204              # stops it first; ?files=1: -> ModelRemoval (daemon.api.files)
    POST   /api/models/{id}/start           -> ModelStatus      # ?wait=0|1&force=0|1 (force: past admission)
    POST   /api/models/{id}/stop            -> ModelStatus
    POST   /api/models/{id}/restart         -> ModelStatus
    GET    /api/models/{id}/logs            -> text/event-stream  # ?tail=N&follow=0|1
    GET    /api/models/{id}/history         -> HistorySeries    # ?range=5m|1h|24h|7d
    GET    /api/nodes/{id}/history          -> HistorySeries    # ?range=5m|1h|24h|7d
    GET    /api/nodes                       -> list[NodeView]   # paired nodes and this machine
    GET    /api/nodes/discovered            -> list[DiscoveredNode]  # agents waiting to be paired
    POST   /api/nodes/discovered            -> NodeAddResult    # body: NodeAddressRequest (manual add)
    POST   /api/nodes/pair                  -> NodeView         # body: NodePairRequest; 201
    POST   /api/nodes/ca-rotation           -> CaRotationResult # new CA on every online node, old retired; 409 while pairing
    GET    /api/nodes/{id}                  -> NodeView
    DELETE /api/nodes/{id}                  -> 204              # stops its models, unpairs the agent
    GET    /api/nodes/{id}/gpus/{gpu}/history -> HistorySeries  # ?range=5m|1h|24h|7d; gpu: UUID or index
    GET    /api/nodes/{id}/files            -> NodeFilesView    # the models folder's files, their models, the disk
    DELETE /api/nodes/{id}/files            -> FileRemoved      # ?path=P; a file no model uses (409 file_in_use)
    GET    /api/nodes/{id}/services         -> ServicesList     # ?all=0|1 (daemon.api.services)
    POST   /api/nodes/{id}/services/{name}/{action} -> ServiceActionResult  # start|stop|restart; body: ServiceActionBody
    GET    /api/nodes/{id}/services/policy  -> ServicesPolicy   # PUT too, body: ServiceNames (this node's)
    GET    /api/services/policy             -> ServicesPolicy   # PUT too, body: ServiceNames (every node's)
    GET    /api/nodes/upgrade               -> RolloutView      # the agent rollout, per node
    POST   /api/nodes/upgrade               -> RolloutView      # body: UpgradeRequest; 202, 409 upgrade_running
    GET    /api/nodes/runtime-upgrade       -> RuntimeRolloutView  # the llama.cpp build rollout, per node
    POST   /api/nodes/runtime-upgrade       -> RuntimeRolloutView  # body: RuntimeUpgradeRequest; 202,
                                                                   # 409 runtime_upgrade_running, 422 runtime_build_refused
    GET    /api/keys                        -> list[ApiKeyInfo]
    POST   /api/keys                        -> ApiKeyCreated    # body: ApiKeyCreate; 201
    PATCH  /api/keys/{id}                   -> ApiKeyInfo       # body: ApiKeyLimits (fields sent change)
    DELETE /api/keys/{id}                   -> 204
    GET    /api/settings                    -> DaemonSettings
    PUT    /api/settings                    -> DaemonSettings
    GET    /api/requests                    -> list[RequestRecord]  # ?model=&key_id=&status=404|5xx&slower_than_ms=&limit=N
                                                                    # (daemon.api.access_log); 422 invalid_filter
    GET    /api/requests/{id}               -> RequestRecord    # id: a /v1 answer's X-Request-Id; 404 request_not_found
    GET    /api/audit                       -> AuditPage        # ?since=&until=&actor=&action=&subject=&limit=&before=
    GET    /api/conversations               -> list[ConversationSummary]  # saved chats, newest first
    POST   /api/conversations               -> Conversation     # body: ConversationCreate; 201
    GET    /api/conversations/{id}          -> Conversation     # 404 conversation_not_found
    PATCH  /api/conversations/{id}          -> Conversation     # body: ConversationRename
    DELETE /api/conversations/{id}          -> 204
    POST   /api/conversations/{id}/messages -> Conversation     # body: ConversationAppend (keep: regenerate, edit)
    GET    /api/conversations/{id}/export   -> text             # ?format=md|json
    POST   /api/shutdown                    -> {"pid", "stopped_models"}  # ?stop_models=0|1; 202
    GET    /api/backups                     -> BackupListing    # the backup directory's files (daemon.api.backup)
    POST   /api/backups                     -> the backup's text | BackupFile  # body: BackupCreate; 201 when saved
    GET    /api/backups/{name}              -> the backup's text
    POST   /api/backups/restore/preview     -> RestorePreview   # body: RestoreRequest; changes nothing
    POST   /api/backups/restore             -> RestoreResult    # body: RestoreRequest
    GET    /api/fit                         -> FitReport        # ?node=ID&path=P | &hf_repo=R&hf_file=F&revision=V; &ctx_size=N&parallel=N&n_gpu_layers=N
    POST   /api/fit                         -> FitReport        # body: FitQuery
    POST   /api/plan                        -> Plan             # body: PlanQuery; how it runs on each node
    POST   /api/downloads                   -> Transfer         # body: DownloadQuery; 202
    GET    /api/imports/ollama              -> list[OllamaModelInfo]  # ?node=ID&store=PATH
    GET    /api/imports/lmstudio            -> list[LmStudioModel]  # ?node=ID&folder=PATH
    POST   /api/imports/lmstudio            -> Transfer         # body: LmStudioImportQuery; 202
    POST   /api/imports/ollama              -> Transfer         # body: OllamaImportQuery; 202
    POST   /api/imports/folder              -> Transfer         # body: FolderImportQuery; 202
    GET    /api/transfers                   -> list[Transfer]   # events: transfer.state, transfer.progress
    GET    /api/transfers/{id}              -> Transfer
    POST   /api/transfers/{id}/cancel       -> Transfer
    POST   /api/transfers/{id}/pause        -> Transfer         # a download, its partial kept; 409 transfer_refused
    POST   /api/transfers/{id}/resume       -> Transfer         # a paused one, on from its partial (HTTP Range)
    POST   /api/transfers/{id}/retry        -> Transfer         # a failed or cancelled download
    POST   /api/mirror                      -> Transfer         # body: MirrorQuery; 202 (daemon.api.mirror)
    GET    /api/hub/search                  -> HubSearchResult  # ?q=TEXT&format=gguf|mlx|safetensors&limit=N (daemon.api.hub)
    GET    /api/hub/repos/{owner}/{name}/files -> HubRepoFiles  # GGUF models by quant; 404 no_gguf_files, 403 repo_gated
    GET    /api/hub/catalog                 -> CatalogView      # the curated catalog, each entry's fit on this machine
    GET    /api/model-updates               -> list[ModelUpdate]  # the last check per hub model (daemon.api.model_updates)
    POST   /api/model-updates/check         -> list[ModelUpdate]  # ask the hub now
    POST   /api/models/{id}/update          -> Transfer         # 202; 409 no_hub_origin | update_refused | no_update
    POST   /api/models/{id}/rollback        -> ModelView        # 409 nothing_to_roll_back
    POST   /api/jobs/benchmark              -> JobView          # body: BenchmarkRequest; 202, 409 job_conflict
    POST   /api/jobs/tune                   -> JobView          # body: TuneRequest; 202, 409 job_conflict
    POST   /api/jobs/tune/plan              -> TuningPlan       # body: TuneRequest
    GET    /api/jobs                        -> list[JobView]    # ?model=ID&kind=benchmark|tune
    GET    /api/jobs/{id}                   -> JobView          # with its result
    POST   /api/jobs/{id}/cancel            -> JobView          # returns once the model is restored
    POST   /api/jobs/{id}/apply             -> ModelView        # ?restart=0|1; 409 no_winner
    GET    /healthz                         -> {"status": "ok"}  (no token)
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agent.api.sources import FitReport, OllamaModelInfo
from core.http import ErrorMap, JsonHttp, error_envelope
from daemon.api.audit import CLIENT_HEADER, AuditPage
from daemon.api.backup import BackupFile, BackupListing, RestorePreview, RestoreResult
from daemon.api.ca_rotation import CaRotationResult
from daemon.api.conversations import (
    Conversation,
    ConversationAppend,
    ConversationCreate,
    ConversationMessage,
    ConversationRename,
    ConversationSummary,
    ExportFormat,
)
from daemon.api.files import FileRemoved, ModelRemoval, NodeFilesView
from daemon.api.hub import CatalogView, HubFormat, HubRepoFiles, HubSearchResult
from daemon.api.jobs import BenchmarkRequest, JobView, TuneRequest, TuningPlan
from daemon.api.mirror import MirrorQuery
from daemon.api.model_updates import ModelUpdate
from daemon.api.models import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyLimits,
    DaemonSettings,
    EventsPage,
    HistoryRange,
    HistorySeries,
    ModelDefinition,
    ModelStatus,
    ModelView,
    RequestRecord,
    StatusResponse,
)
from daemon.api.nodes import DiscoveredNode, NodeAddressRequest, NodeAddResult, NodeView
from daemon.api.plan import Plan, PlanQuery
from daemon.api.runtime_upgrades import RuntimeRolloutView, RuntimeUpgradeRequest
from daemon.api.services import (
    ServiceAction,
    ServiceActionBody,
    ServiceActionResult,
    ServiceNames,
    ServicesList,
    ServicesPolicy,
)
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    FolderImportQuery,
    LmStudioImportQuery,
    LmStudioModel,
    OllamaImportQuery,
    Transfer,
)
from daemon.api.upgrades import RolloutView, UpgradeRequest

_CALL_TIMEOUT = aiohttp.ClientTimeout(total=60, connect=5)


class DaemonError(Exception):
    """The daemon answered with an error, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status = status
        self.code = code
        self.message = message


def daemon_errors(base_url: str) -> ErrorMap:
    """``DaemonError`` for each way a call to the daemon at ``base_url`` can fail."""
    return ErrorMap(answered=_error_from,
                    unreachable=lambda exc: DaemonError(0, "unreachable",
                                                        f"cannot reach the daemon at {base_url}: {exc}"),
                    timed_out=lambda: DaemonError(0, "timeout", f"the daemon at {base_url} did not answer in time"))


class DaemonClient:
    """Typed admin client. One instance per daemon; close it when done."""

    def __init__(self, base_url: str, token: str, session: aiohttp.ClientSession | None = None,
                 client_name: str | None = None) -> None:
        """``client_name`` (app, ctl, ...) is who the audit log records for this client's actions."""
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}", **({CLIENT_HEADER: client_name} if client_name else {})}
        self._http = JsonHttp(self.base_url, daemon_errors(self.base_url), session=session,
                              headers=headers, connect_s=5,
                              call_timeout=_CALL_TIMEOUT, poll_grace_s=15)
        # Status calls on connections of their own: the daemon answers those off its loop (daemon.admin_lane)
        # while /v1 saturates it; a connection that carried another call is the loop's from then on.
        self._status_http = JsonHttp(self.base_url, daemon_errors(self.base_url), session=session,
                                     headers=headers, connect_s=5, call_timeout=_CALL_TIMEOUT)

    @property
    def session(self) -> aiohttp.ClientSession:
        return self._http.session

    async def close(self) -> None:
        await self._http.close()
        await self._status_http.close()

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: Any = None, timeout: aiohttp.ClientTimeout = _CALL_TIMEOUT) -> Any:
        return await self._http.call(method, path, params=params, body=body, timeout=timeout)

    async def healthz(self) -> bool:
        try:
            async with self.session.get(self.base_url + "/healthz",
                                        timeout=aiohttp.ClientTimeout(total=3)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def status(self) -> StatusResponse:
        return StatusResponse.model_validate(await self._status_http.call("GET", "/api/status"))

    async def events(self, since: int, timeout: float = 30.0) -> EventsPage:
        return EventsPage.model_validate(await self._http.poll("/api/events", since, timeout))

    async def list_models(self) -> list[ModelView]:
        return [ModelView.model_validate(m) for m in await self._call("GET", "/api/models")]

    async def get_model(self, model_id: str) -> ModelView:
        return ModelView.model_validate(await self._call("GET", f"/api/models/{model_id}"))

    async def create_model(self, definition: ModelDefinition) -> ModelView:
        data = await self._call("POST", "/api/models", body=definition.model_dump(mode="json"))
        return ModelView.model_validate(data)

    async def update_model(self, definition: ModelDefinition) -> ModelView:
        data = await self._call("PUT", f"/api/models/{definition.id}", body=definition.model_dump(mode="json"))
        return ModelView.model_validate(data)

    async def delete_model(self, model_id: str) -> None:
        await self._call("DELETE", f"/api/models/{model_id}")

    async def delete_model_with_files(self, model_id: str) -> ModelRemoval:
        """Remove a model, then its files no other model uses in its node's models folder: what was
        deleted and freed, and what was kept and why."""
        data = await self._call("DELETE", f"/api/models/{model_id}", params={"files": 1},
                                timeout=aiohttp.ClientTimeout(total=180, connect=5))
        return ModelRemoval.model_validate(data)

    async def start_model(self, model_id: str, wait: bool = False, force: bool = False) -> ModelStatus:
        """Start a model; ``force`` starts it even when memory admission says it will not fit."""
        timeout = aiohttp.ClientTimeout(total=3700 if wait else 60, connect=5)
        params = {"wait": int(wait), **({"force": 1} if force else {})}
        data = await self._call("POST", f"/api/models/{model_id}/start", params=params, timeout=timeout)
        return ModelStatus.model_validate(data)

    async def stop_model(self, model_id: str) -> ModelStatus:
        return ModelStatus.model_validate(await self._call("POST", f"/api/models/{model_id}/stop"))

    async def restart_model(self, model_id: str) -> ModelStatus:
        return ModelStatus.model_validate(await self._call("POST", f"/api/models/{model_id}/restart"))

    async def logs(self, model_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]:
        """Log lines of a model: the last ``tail``, then new ones while ``follow``."""
        async for data in self._http.sse(f"/api/models/{model_id}/logs",
                                         params={"tail": tail, "follow": int(follow)}):
            yield json.loads(data)

    async def model_history(self, model_id: str, range_: HistoryRange = "5m") -> HistorySeries:
        data = await self._call("GET", f"/api/models/{model_id}/history", params={"range": range_})
        return HistorySeries.model_validate(data)

    async def node_history(self, node_id: str = "local", range_: HistoryRange = "5m") -> HistorySeries:
        data = await self._call("GET", f"/api/nodes/{node_id}/history", params={"range": range_})
        return HistorySeries.model_validate(data)

    async def list_keys(self) -> list[ApiKeyInfo]:
        return [ApiKeyInfo.model_validate(k) for k in await self._call("GET", "/api/keys")]

    async def create_key(self, name: str) -> ApiKeyCreated:
        data = await self._call("POST", "/api/keys", body=ApiKeyCreate(name=name).model_dump())
        return ApiKeyCreated.model_validate(data)

    async def set_key_limits(self, key_id: str, limits: ApiKeyLimits) -> ApiKeyInfo:
        """Change the limits ``limits`` sets (a field given as None clears it; one left unset stays)."""
        data = await self._call("PATCH", f"/api/keys/{key_id}", body=limits.model_dump(exclude_unset=True))
        return ApiKeyInfo.model_validate(data)

    async def revoke_key(self, key_id: str) -> None:
        await self._call("DELETE", f"/api/keys/{key_id}")

    async def get_settings(self) -> DaemonSettings:
        return DaemonSettings.model_validate(await self._call("GET", "/api/settings"))

    async def put_settings(self, settings: DaemonSettings) -> DaemonSettings:
        # Only what the caller set: DaemonSettings(lan_access=True) leaves [tracing] as it is.
        data = await self._call("PUT", "/api/settings", body=settings.model_dump(exclude_unset=True))
        return DaemonSettings.model_validate(data)

    async def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
                    action: str | None = None, subject: str | None = None, limit: int = 100,
                    before: int | None = None) -> AuditPage:
        """The audit log, newest first; ``before`` is a page's ``next_before`` (the next, older page)."""
        params = {k: v for k, v in {"since": since, "until": until, "actor": actor, "action": action,
                                    "subject": subject, "limit": limit, "before": before}.items() if v is not None}
        return AuditPage.model_validate(await self._call("GET", "/api/audit", params=params))

    async def requests(self, limit: int = 100, *, model: str | None = None, key_id: str | None = None,
                       status: str | None = None, slower_than_ms: float | None = None) -> list[RequestRecord]:
        """The access log, newest first: /v1 requests for ``model`` (asked for or answering as a fallback),
        with the key ``key_id``, a ``status`` (``"404"``) or class (``"5xx"``), slower than ``slower_than_ms``.
        The daemon judges the filters (422 ``invalid_filter``)."""
        params = {k: v for k, v in {"model": model, "key_id": key_id, "status": status,
                                    "slower_than_ms": slower_than_ms, "limit": limit}.items() if v is not None}
        return [RequestRecord.model_validate(r) for r in await self._call("GET", "/api/requests", params=params)]

    async def request(self, request_id: str) -> RequestRecord:
        """What happened to one /v1 request, by the X-Request-Id its answer carried (404 ``request_not_found``)."""
        path = f"/api/requests/{urllib.parse.quote(request_id, safe='')}"
        return RequestRecord.model_validate(await self._call("GET", path))

    # --- saved chats (daemon.conversations) ------------------------------------------------------
    async def list_conversations(self) -> list[ConversationSummary]:
        """The saved conversations, the most recently changed first."""
        return [ConversationSummary.model_validate(c) for c in await self._call("GET", "/api/conversations")]

    async def create_conversation(self, new: ConversationCreate) -> Conversation:
        data = await self._call("POST", "/api/conversations", body=new.model_dump(mode="json"))
        return Conversation.model_validate(data)

    async def get_conversation(self, conversation_id: str) -> Conversation:
        """One conversation with its messages (404 ``conversation_not_found``)."""
        return Conversation.model_validate(await self._call("GET", _conversation_path(conversation_id)))

    async def rename_conversation(self, conversation_id: str, title: str) -> Conversation:
        body = ConversationRename(title=title).model_dump()
        return Conversation.model_validate(await self._call("PATCH", _conversation_path(conversation_id), body=body))

    async def delete_conversation(self, conversation_id: str) -> None:
        await self._call("DELETE", _conversation_path(conversation_id))

    async def append_messages(self, conversation_id: str, messages: list[ConversationMessage],
                              keep: int | None = None, model: str | None = None) -> Conversation:
        """Add ``messages`` after the first ``keep`` (all when None: an append; fewer: a regenerate
        or an edit replaces what followed)."""
        body = ConversationAppend(messages=messages, keep=keep, model=model).model_dump(mode="json")
        data = await self._call("POST", _conversation_path(conversation_id) + "/messages", body=body)
        return Conversation.model_validate(data)

    async def export_conversation(self, conversation_id: str, fmt: ExportFormat = "md") -> str:
        """The conversation as a Markdown document (``md``) or JSON (``json``)."""
        return await self._http.text("GET", _conversation_path(conversation_id) + "/export", params={"format": fmt})

    async def shutdown(self, stop_models: bool = False) -> dict[str, Any]:
        """Ask the daemon process to exit; it answers first. Its models keep running (and are
        adopted at its next start) unless ``stop_models``."""
        timeout = aiohttp.ClientTimeout(total=300 if stop_models else 60, connect=5)
        data = await self._call("POST", "/api/shutdown", params={"stop_models": int(stop_models)}, timeout=timeout)
        return dict(data)

    # --- getting models: fit, downloads, imports, transfers (daemon.sources.api) -------------------
    async def fit(self, query: FitQuery) -> FitReport:
        """Will it fit? For a file on the node or a Hugging Face file (only its header is read)."""
        timeout = aiohttp.ClientTimeout(total=200, connect=5)
        data = await self._call("POST", "/api/fit", body=query.model_dump(mode="json"), timeout=timeout)
        return FitReport.model_validate(data)

    async def plan(self, query: PlanQuery) -> Plan:
        """How a model file runs on each online node (or ``query.node``): every GPU, a split, a partial
        offload, the CPU, with the context that fits and whether it fits now; only headers are read."""
        timeout = aiohttp.ClientTimeout(total=200, connect=5)
        return Plan.model_validate(await self._call("POST", "/api/plan", body=query.model_dump(mode="json"),
                                                    timeout=timeout))

    async def download(self, query: DownloadQuery) -> Transfer:
        return Transfer.model_validate(await self._call("POST", "/api/downloads", body=query.model_dump(mode="json")))

    async def ollama_models(self, node: str = "local", store: str | None = None) -> list[OllamaModelInfo]:
        params = {"node": node, **({"store": store} if store else {})}
        return [OllamaModelInfo.model_validate(m) for m in await self._call("GET", "/api/imports/ollama", params=params)]

    async def lmstudio_models(self, node: str = "local", folder: str | None = None) -> list[LmStudioModel]:
        """GGUF models in LM Studio's models folders on ``node`` (and in ``folder``, of the same layout),
        each with the model already running it; add them with ``import_lmstudio``."""
        params = {"node": node, **({"folder": folder} if folder else {})}
        return [LmStudioModel.model_validate(m) for m in await self._call("GET", "/api/imports/lmstudio",
                                                                             params=params)]

    async def import_lmstudio(self, query: LmStudioImportQuery) -> Transfer:
        data = await self._call("POST", "/api/imports/lmstudio", body=query.model_dump(mode="json"))
        return Transfer.model_validate(data)

    async def import_ollama(self, query: OllamaImportQuery) -> Transfer:
        data = await self._call("POST", "/api/imports/ollama", body=query.model_dump(mode="json"))
        return Transfer.model_validate(data)

    async def import_folder(self, query: FolderImportQuery) -> Transfer:
        data = await self._call("POST", "/api/imports/folder", body=query.model_dump(mode="json"))
        return Transfer.model_validate(data)

    async def transfers(self) -> list[Transfer]:
        return [Transfer.model_validate(t) for t in await self._call("GET", "/api/transfers")]

    async def transfer(self, transfer_id: str) -> Transfer:
        return Transfer.model_validate(await self._call("GET", f"/api/transfers/{transfer_id}"))

    async def cancel_transfer(self, transfer_id: str) -> Transfer:
        return Transfer.model_validate(await self._call("POST", f"/api/transfers/{transfer_id}/cancel"))

    async def pause_transfer(self, transfer_id: str) -> Transfer:
        """Stop a download and keep its partial file (``daemon.sources.downloads``)."""
        return Transfer.model_validate(await self._call("POST", f"/api/transfers/{transfer_id}/pause"))

    async def resume_transfer(self, transfer_id: str) -> Transfer:
        return Transfer.model_validate(await self._call("POST", f"/api/transfers/{transfer_id}/resume"))

    async def retry_transfer(self, transfer_id: str) -> Transfer:
        return Transfer.model_validate(await self._call("POST", f"/api/transfers/{transfer_id}/retry"))

    async def mirror(self, query: MirrorQuery) -> Transfer:
        """Push a model version this machine has to another node (``daemon.sources.mirror``); follow the transfer."""
        return Transfer.model_validate(await self._call("POST", "/api/mirror", body=query.model_dump(mode="json")))

    # --- nodes ---------------------------------------------------------------------------------
    async def list_nodes(self) -> list[NodeView]:
        return [NodeView.model_validate(n) for n in await self._call("GET", "/api/nodes")]

    async def get_node(self, node_id: str) -> NodeView:
        return NodeView.model_validate(await self._call("GET", f"/api/nodes/{node_id}"))

    async def set_node_backend(self, node_id: str, backend: str) -> NodeView:
        """The node's backend choice: auto, cuda, vulkan or cpu (``daemon.nodes.backends``)."""
        return NodeView.model_validate(await self._call("PUT", f"/api/nodes/{node_id}/backend",
                                                        body={"backend": backend}))

    async def discovered_nodes(self) -> list[DiscoveredNode]:
        return [DiscoveredNode.model_validate(n) for n in await self._call("GET", "/api/nodes/discovered")]

    async def add_node_address(self, address: str) -> NodeAddResult:
        body = NodeAddressRequest(address=address).model_dump()
        return NodeAddResult.model_validate(await self._call("POST", "/api/nodes/discovered", body=body))

    async def pair_node(self, address: str, code: str, fingerprint: str) -> NodeView:
        """Pair the agent at ``address`` whose certificate has ``fingerprint`` (the one the user
        compared), proving ``code`` to it. The daemon never stores or logs the code."""
        body = {"address": address, "code": code, "fingerprint": fingerprint}
        timeout = aiohttp.ClientTimeout(total=90, connect=5)
        return NodeView.model_validate(await self._call("POST", "/api/nodes/pair", body=body, timeout=timeout))

    async def rotate_ca(self) -> CaRotationResult:
        """Replace the daemon's CA: every online node gets a certificate from a new CA while both are
        trusted, then the old one is retired; offline nodes are named (pair them again)."""
        data = await self._call("POST", "/api/nodes/ca-rotation", timeout=aiohttp.ClientTimeout(total=600, connect=5))
        return CaRotationResult.model_validate(data)

    async def remove_node(self, node_id: str) -> None:
        await self._call("DELETE", f"/api/nodes/{node_id}", timeout=aiohttp.ClientTimeout(total=120, connect=5))

    async def upgrade_status(self) -> RolloutView:
        return RolloutView.model_validate(await self._call("GET", "/api/nodes/upgrade"))

    async def start_upgrade(self, folder: str | None = None, feed_url: str | None = None) -> RolloutView:
        """Roll the agent release (staged in ``folder``, or fetched from the signed ``feed_url``) out over
        the paired nodes, one at a time (events: upgrade.*)."""
        body = UpgradeRequest(folder=folder, feed_url=feed_url).model_dump()
        return RolloutView.model_validate(await self._call("POST", "/api/nodes/upgrade", body=body))

    async def runtime_upgrade_status(self) -> RuntimeRolloutView:
        return RuntimeRolloutView.model_validate(await self._call("GET", "/api/nodes/runtime-upgrade"))

    async def start_runtime_upgrade(self, folder: str | None = None,
                                    smoke_model: str | None = None) -> RuntimeRolloutView:
        """Roll a llama.cpp build out over the paired nodes, one at a time (events: runtime_upgrade.*)."""
        body = RuntimeUpgradeRequest(folder=folder, smoke_model=smoke_model).model_dump()
        return RuntimeRolloutView.model_validate(await self._call("POST", "/api/nodes/runtime-upgrade", body=body))

    async def gpu_history(self, node_id: str, gpu: str, range_: HistoryRange = "5m") -> HistorySeries:
        data = await self._call("GET", f"/api/nodes/{node_id}/gpus/{gpu}/history", params={"range": range_})
        return HistorySeries.model_validate(data)

    # --- Discover: the hub's models and the curated catalog (daemon.api.hub) -----------------------
    async def hub_search(self, query: str, fmt: HubFormat = "gguf", limit: int = 20) -> HubSearchResult:
        """Repositories on the Hugging Face hub matching ``query``, most downloaded first."""
        data = await self._call("GET", "/api/hub/search", params={"q": query, "format": fmt, "limit": limit})
        return HubSearchResult.model_validate(data)

    async def hub_repo_files(self, repo: str) -> HubRepoFiles:
        """A repository's GGUF models by quant, with their sizes and its vision projectors."""
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise DaemonError(422, "invalid_request", f"'{repo}' is not a repository: owner/name")
        path = f"/api/hub/repos/{urllib.parse.quote(owner, safe='')}/{urllib.parse.quote(name, safe='')}/files"
        return HubRepoFiles.model_validate(await self._call("GET", path))

    async def hub_catalog(self) -> CatalogView:
        """The curated catalog (short names such as gemma3:1b), each entry with whether it fits here."""
        return CatalogView.model_validate(await self._call("GET", "/api/hub/catalog"))

    # --- model updates from the hub (daemon.sources.updates) -------------------------------------
    async def model_updates(self, check: bool = False) -> list[ModelUpdate]:
        """Each hub model's update state: the last check's (daily), or the hub's answer now with ``check``."""
        answer = await self._call("POST", "/api/model-updates/check") if check else \
            await self._call("GET", "/api/model-updates")
        return [ModelUpdate.model_validate(u) for u in answer]

    async def update_model_files(self, model_id: str) -> Transfer:
        """Fetch the hub's newest revision of the model beside its files; swapped in (and restarted) when done."""
        return Transfer.model_validate(await self._call("POST", f"/api/models/{model_id}/update"))

    async def rollback_model(self, model_id: str) -> ModelView:
        """Back to the files (and revision) kept by the last update."""
        return ModelView.model_validate(await self._call("POST", f"/api/models/{model_id}/rollback"))

    # --- host services of a node (daemon.services.api) ------------------------------------------
    async def node_files(self, node_id: str = "local") -> NodeFilesView:
        """The node's model files (its models folder), each with the models that use it, and its disk."""
        return NodeFilesView.model_validate(await self._call("GET", f"/api/nodes/{node_id}/files"))

    async def remove_node_file(self, node_id: str, path: str) -> FileRemoved:
        """Remove one file no model uses from the node's models folder."""
        data = await self._call("DELETE", f"/api/nodes/{node_id}/files", params={"path": path})
        return FileRemoved.model_validate(data)

    async def list_services(self, node_id: str, every: bool = False) -> ServicesList:
        """The node's whitelisted services with their state; ``every``: all its service manager knows."""
        data = await self._call("GET", f"/api/nodes/{node_id}/services", params={"all": int(every)})
        return ServicesList.model_validate(data)

    async def service_action(self, node_id: str, name: str, action: ServiceAction,
                             confirm: str | None = None) -> ServiceActionResult:
        """Start, stop or restart a service on a node; a protected one needs ``confirm`` = its name, typed."""
        path = f"/api/nodes/{node_id}/services/{urllib.parse.quote(name, safe='@:+')}/{action}"
        data = await self._call("POST", path, body=ServiceActionBody(confirm=confirm).model_dump(),
                                timeout=aiohttp.ClientTimeout(total=180, connect=5))
        return ServiceActionResult.model_validate(data)

    async def services_policy(self, node_id: str | None = None) -> ServicesPolicy:
        """The daemon's services whitelist (``node_id``: its ``nodes`` holds only that node's block)."""
        path = "/api/services/policy" if node_id is None else f"/api/nodes/{node_id}/services/policy"
        return ServicesPolicy.model_validate(await self._call("GET", path))

    async def set_services_policy(self, names: ServiceNames, node_id: str | None = None) -> ServicesPolicy:
        """Replace every node's block of the whitelist (``node_id`` None) or that node's; the policy after.
        422 ``service_denied`` for a name on the deny list, ``service_invalid_name`` for a bad one."""
        path = "/api/services/policy" if node_id is None else f"/api/nodes/{node_id}/services/policy"
        return ServicesPolicy.model_validate(await self._call("PUT", path, body=names.model_dump()))

    # --- jobs: benchmarks and tuning ------------------------------------------------------------
    async def start_benchmark(self, request: BenchmarkRequest) -> JobView:
        data = await self._call("POST", "/api/jobs/benchmark", body=request.model_dump(mode="json"))
        return JobView.model_validate(data)

    async def start_tune(self, request: TuneRequest) -> JobView:
        return JobView.model_validate(await self._call("POST", "/api/jobs/tune", body=request.model_dump(mode="json")))

    async def plan_tune(self, request: TuneRequest) -> TuningPlan:
        data = await self._call("POST", "/api/jobs/tune/plan", body=request.model_dump(mode="json"))
        return TuningPlan.model_validate(data)

    async def list_jobs(self, model: str | None = None, kind: str | None = None) -> list[JobView]:
        params = {k: v for k, v in (("model", model), ("kind", kind)) if v}
        return [JobView.model_validate(j) for j in await self._call("GET", "/api/jobs", params=params)]

    async def get_job(self, job_id: str) -> JobView:
        return JobView.model_validate(await self._call("GET", f"/api/jobs/{job_id}"))

    async def cancel_job(self, job_id: str) -> JobView:
        timeout = aiohttp.ClientTimeout(total=400, connect=5)  # the model is restored before the answer
        return JobView.model_validate(await self._call("POST", f"/api/jobs/{job_id}/cancel", timeout=timeout))

    async def apply_job(self, job_id: str, restart: bool = False) -> ModelView:
        data = await self._call("POST", f"/api/jobs/{job_id}/apply", params={"restart": int(restart)})
        return ModelView.model_validate(data)

    # --- backup and restore (daemon.api.backup) ---------------------------------------------------
    async def create_backup(self, passphrase: str | None = None) -> str:
        """A backup of the daemon, as the file's text (with a passphrase: the CA and secrets encrypted in it)."""
        return await self._http.text("POST", "/api/backups", body=_backup_body(passphrase, save=False),
                                     timeout=_BACKUP_TIMEOUT)

    async def save_backup(self, passphrase: str | None = None) -> BackupFile:
        """A backup written into the daemon's backup directory."""
        data = await self._call("POST", "/api/backups", body=_backup_body(passphrase, save=True),
                                timeout=_BACKUP_TIMEOUT)
        return BackupFile.model_validate(data)

    async def list_backups(self) -> BackupListing:
        return BackupListing.model_validate(await self._call("GET", "/api/backups"))

    async def download_backup(self, name: str) -> str:
        return await self._http.text("GET", f"/api/backups/{name}")

    async def preview_restore(self, document: str, passphrase: str | None = None,
                              replace_ca: bool = False) -> RestorePreview:
        """What restoring ``document`` (a backup file's text) would change; changes nothing."""
        body = {"document": document, "passphrase": passphrase, "replace_ca": replace_ca}
        data = await self._call("POST", "/api/backups/restore/preview", body=body, timeout=_BACKUP_TIMEOUT)
        return RestorePreview.model_validate(data)

    async def restore_backup(self, document: str, passphrase: str | None = None,
                             replace_ca: bool = False, downloads: bool = True) -> RestoreResult:
        """Restore ``document``; with ``downloads`` the missing model files that can be fetched are."""
        body = {"document": document, "passphrase": passphrase, "replace_ca": replace_ca, "downloads": downloads}
        data = await self._call("POST", "/api/backups/restore", body=body, timeout=_BACKUP_TIMEOUT)
        return RestoreResult.model_validate(data)


_BACKUP_TIMEOUT = aiohttp.ClientTimeout(total=120, connect=5)  # the passphrase's key derivation, by design slow


def _backup_body(passphrase: str | None, *, save: bool) -> dict[str, Any]:
    return {"passphrase": passphrase, "save": save}


def _error_from(status: int, text: str) -> DaemonError:
    err = error_envelope(text)
    if err is None:
        return DaemonError(status, "error", text[:500])
    return DaemonError(status, str(err.get("code") or err.get("type") or "error"), str(err.get("message", text)))


def _conversation_path(conversation_id: str) -> str:
    return f"/api/conversations/{urllib.parse.quote(conversation_id, safe='')}"
