"""The daemon's route tables: every route of ``/healthz``, ``/metrics``, ``/v1`` and ``/api``, and of the
Ollama API on its own port (``ollama_route_table``, ``daemon.ollama``).

Each line is method, path, handler, and in a trailing comment its query parameters or body. The
handlers live with their features (``daemon.admin``, ``daemon.models.api``, ``daemon.files.api``, ``daemon.sources.api``,
``daemon.sources.hub_api``, ``daemon.sources.updates_api``, ``daemon.conversations.api``, ``daemon.jobs.api``, ``daemon.nodes.api``, ``daemon.upgrades.api``, ``daemon.runtimes.api``, ``daemon.router.router``,
``daemon.probes``) and are built by the composition root (``daemon.deps.handlers``); errors they
raise are ``daemon.errors.DaemonProblem``s, answered by the errors middleware in ``daemon.server``,
which answers a node agent's ``AgentError`` too (``daemon.nodes.agent_errors``).

Order matters where a literal path shares a prefix with a ``{id}`` path: ``/api/nodes/upgrade``,
``/api/nodes/discovered``, ``/api/nodes/pair`` and ``/api/nodes/ca-rotation`` come before ``/api/nodes/{id}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from daemon.admin import AdminApi
from daemon.audit.api import AuditApi
from daemon.backup.api import BackupApi
from daemon.conversations.api import ConversationsApi
from daemon.files.api import NodeFilesApi
from daemon.fleet_metrics.discovery import PrometheusTargets
from daemon.jobs.api import JobsApi
from daemon.models.api import ModelsApi
from daemon.nodes.api import NodesApi
from daemon.ollama.api import OllamaApi
from daemon.probes import Probes
from daemon.router.router import Router
from daemon.runtimes.api import RuntimeUpgradesApi
from daemon.services.api import ServicesApi
from daemon.services.policy_api import ServicesPolicyApi
from daemon.sources.api import SourcesApi
from daemon.sources.hub_api import HubApi
from daemon.sources.mirror import MirrorApi
from daemon.sources.updates_api import ModelUpdatesApi
from daemon.upgrades.api import UpgradesApi


@dataclass(frozen=True)
class Handlers:
    probes: Probes
    router: Router
    admin: AdminApi
    models: ModelsApi
    sources: SourcesApi
    jobs: JobsApi
    nodes: NodesApi
    upgrades: UpgradesApi
    runtime_upgrades: RuntimeUpgradesApi
    mirror: MirrorApi
    services: ServicesApi
    services_policy: ServicesPolicyApi
    backup: BackupApi
    audit: AuditApi
    prometheus: PrometheusTargets
    files: NodeFilesApi
    hub: HubApi
    model_updates: ModelUpdatesApi
    conversations: ConversationsApi


def route_table(h: Handlers) -> list[web.RouteDef]:
    probes, router, admin, models, sources, jobs, nodes, upgrades = (
        h.probes, h.router, h.admin, h.models, h.sources, h.jobs, h.nodes, h.upgrades)
    return [
        web.get("/healthz", probes.healthz),                                 # no token
        web.get("/metrics", probes.metrics),                                 # Prometheus text, no token

        # --- /v1: API key when keys are required -------------------------------------------------
        web.get("/v1/models", router.list_models),
        web.get("/v1/models/{name:.+}", router.retrieve_model),              # else 404 model_not_found
        web.route("*", "/v1/{path:.*}", router.proxy),                       # routed by the body's model

        # --- /api: admin token ---------------------------------------------------------------------
        web.get("/api/status", admin.status),                                # a plain call: off the loop (daemon.admin_lane)
        web.get("/api/events", admin.events),                                # ?since=ID&timeout=S
        web.get("/api/models", models.list_models),
        web.post("/api/models", models.create_model),                        # body: ModelDefinition
        web.get("/api/models/{id}", models.get_model),
        web.put("/api/models/{id}", models.update_model),                    # body: ModelDefinition
        web.delete("/api/models/{id}", models.delete_model),                 # ?files=0|1: and its files no other model uses (daemon.files)
        web.post("/api/models/{id}/start", models.start_model),              # ?wait=0|1&force=0|1
        web.post("/api/models/{id}/stop", models.stop_model),
        web.post("/api/models/{id}/restart", models.restart_model),
        web.post("/api/models/{id}/update", h.model_updates.update),         # the hub's newest revision, beside the old files; 202 Transfer
        web.post("/api/models/{id}/rollback", h.model_updates.rollback),     # back to the kept files (daemon.sources.updates)
        web.get("/api/model-updates", h.model_updates.list_updates),         # the last check per hub model
        web.post("/api/model-updates/check", h.model_updates.check),         # ask the hub now
        web.get("/api/models/{id}/logs", models.model_logs),                 # ?tail=N&follow=0|1
        web.get("/api/models/{id}/history", models.model_history),           # ?range=5m|1h|24h|7d
        web.get("/api/nodes/{id}/history", nodes.node_history),              # ?range=5m|1h|24h|7d
        web.get("/api/keys", admin.list_keys),
        web.post("/api/keys", admin.create_key),                             # body: ApiKeyCreate
        web.patch("/api/keys/{id}", admin.set_key_limits),                   # body: ApiKeyLimits (fields sent change)
        web.delete("/api/keys/{id}", admin.revoke_key),
        web.get("/api/settings", admin.get_settings),
        web.put("/api/settings", admin.put_settings),                        # body: DaemonSettings
        web.get("/api/requests", admin.recent_requests),                     # ?model=&key_id=&status=404|5xx&slower_than_ms=&limit=N (daemon.api.access_log)
        web.get("/api/requests/{id}", admin.get_request),                    # id: the X-Request-Id; else 404 request_not_found
        web.get("/api/audit", h.audit.list_audit),                           # ?since=&until=&actor=&action=&subject=&limit=&before= (daemon.audit.api)
        web.get("/api/prometheus/targets", h.prometheus.targets),            # ?node_exporter_port=N; HTTP SD JSON (daemon.fleet_metrics)
        web.post("/api/shutdown", admin.shutdown),                           # ?stop_models=0|1
        web.get("/api/backups", h.backup.list_backups),                      # daemon.backup: the directory's files
        web.post("/api/backups", h.backup.create),                           # body: BackupCreate; the document, or 201 BackupFile
        web.post("/api/backups/restore/preview", h.backup.preview),          # body: RestoreRequest -> RestorePreview
        web.post("/api/backups/restore", h.backup.restore),                  # body: RestoreRequest -> RestoreResult
        web.get("/api/backups/{name}", h.backup.download),                   # a backup file of the directory
        web.get("/api/conversations", h.conversations.list_conversations),   # saved chats, newest first (daemon.conversations)
        web.post("/api/conversations", h.conversations.create),              # body: ConversationCreate; 201
        web.get("/api/conversations/{id}", h.conversations.get),
        web.patch("/api/conversations/{id}", h.conversations.rename),        # body: ConversationRename
        web.delete("/api/conversations/{id}", h.conversations.delete),
        web.post("/api/conversations/{id}/messages", h.conversations.append),  # body: ConversationAppend (keep: regenerate, edit)
        web.get("/api/conversations/{id}/export", h.conversations.export),   # ?format=md|json

        web.get("/api/fit", sources.fit_get),                                # ?node=ID&path=P | &hf_repo=R&hf_file=F&quant=Q&revision=V; &ctx_size=N&parallel=N&n_gpu_layers=N
        web.post("/api/fit", sources.fit),                                   # body: FitQuery
        web.post("/api/plan", sources.plan),                                 # body: PlanQuery; every online node's ways to run it
        web.post("/api/downloads", sources.download),                        # body: DownloadQuery
        web.get("/api/imports/ollama", sources.ollama_models),               # ?node=ID&store=PATH
        web.post("/api/imports/ollama", sources.import_ollama),              # body: OllamaImportQuery
        web.post("/api/imports/folder", sources.import_folder),              # body: FolderImportQuery
        web.get("/api/imports/lmstudio", sources.lmstudio_models),           # ?node=ID&folder=PATH
        web.post("/api/imports/lmstudio", sources.import_lmstudio),          # body: LmStudioImportQuery
        web.get("/api/transfers", sources.list_transfers),
        web.get("/api/transfers/{id}", sources.get_transfer),
        web.post("/api/transfers/{id}/cancel", sources.cancel),
        web.post("/api/transfers/{id}/pause", sources.pause),                # a download; its partial file kept (daemon.sources.downloads)
        web.post("/api/transfers/{id}/resume", sources.resume),              # a paused one, on from its partial (HTTP Range)
        web.post("/api/transfers/{id}/retry", sources.retry),                # a failed or cancelled download
        web.post("/api/mirror", h.mirror.start),                             # body: MirrorQuery; daemon.sources.mirror
        web.get("/api/hub/search", h.hub.search),                            # ?q=TEXT&format=gguf|mlx|safetensors&limit=N (daemon.sources.hub_api)
        web.get("/api/hub/repos/{owner}/{name}/files", h.hub.repo_files),    # the GGUF models by quant, sizes, projectors
        web.get("/api/hub/catalog", h.hub.catalog),                          # the curated catalog, each with its fit here

        web.post("/api/jobs/benchmark", jobs.start_benchmark),               # body: BenchmarkRequest
        web.post("/api/jobs/tune", jobs.start_tune),                         # body: TuneRequest
        web.post("/api/jobs/tune/plan", jobs.plan_tune),                     # body: TuneRequest
        web.get("/api/jobs", jobs.list_jobs),                                # ?model=ID&kind=benchmark|tune
        web.get("/api/jobs/{id}", jobs.get_job),
        web.post("/api/jobs/{id}/cancel", jobs.cancel_job),
        web.post("/api/jobs/{id}/apply", jobs.apply_job),                    # ?restart=0|1

        web.get("/api/nodes/upgrade", upgrades.status),                      # before /api/nodes/{id}
        web.post("/api/nodes/upgrade", upgrades.start),                      # body: UpgradeRequest (optional)
        web.get("/api/nodes/runtime-upgrade", h.runtime_upgrades.status),    # llama.cpp builds: daemon.runtimes
        web.post("/api/nodes/runtime-upgrade", h.runtime_upgrades.start),    # body: RuntimeUpgradeRequest (optional)
        web.get("/api/nodes", nodes.list_nodes),
        web.get("/api/nodes/discovered", nodes.discovered),
        web.post("/api/nodes/discovered", nodes.add_address),                # body: NodeAddressRequest
        web.post("/api/nodes/pair", nodes.pair),                             # body: NodePairRequest
        web.post("/api/nodes/ca-rotation", nodes.rotate_ca),                 # new CA on every node, old retired; 409 while pairing
        web.get("/api/nodes/{id}", nodes.get_node),
        web.delete("/api/nodes/{id}", nodes.remove),
        web.get("/api/nodes/{id}/gpus/{gpu}/history", nodes.gpu_history),    # ?range=5m|1h|24h|7d
        web.get("/api/nodes/{id}/files", h.files.node_files),                # the models folder's files, each with its models; the disk
        web.delete("/api/nodes/{id}/files", h.files.remove_file),            # ?path=P; a file no model uses (409 file_in_use)
        web.put("/api/nodes/{id}/backend", nodes.put_backend),               # body: BackendSetting; daemon.nodes.backends
        web.get("/api/nodes/{id}/services", h.services.list_services),       # ?all=0|1; daemon.services.api
        web.post("/api/nodes/{id}/services/{name}/{action}", h.services.act),  # start|stop|restart; body: ServiceActionBody
        web.get("/api/nodes/{id}/services/policy", h.services_policy.get_policy),  # daemon.services.policy_api
        web.put("/api/nodes/{id}/services/policy", h.services_policy.put_policy),  # body: ServiceNames (this node's)
        web.get("/api/services/policy", h.services_policy.get_policy),       # the daemon's services.json
        web.put("/api/services/policy", h.services_policy.put_policy),       # body: ServiceNames (every node's)
    ]


def ollama_route_table(o: OllamaApi) -> list[web.RouteDef]:
    """The Ollama API's port (11434 by default): each call becomes a /v1 call, with the caller's key."""
    return [
        web.get("/api/version", o.version),                                  # no key
        web.get("/api/tags", o.tags),                                        # what /v1/models lists
        web.post("/api/show", o.show),                                       # body: {"model"}
        web.get("/api/ps", o.ps),                                            # the loaded models
        web.post("/api/chat", o.chat),                                       # body: {"model", "messages", "stream", "options", "format", "tools"}
        web.post("/api/generate", o.generate),                               # body: {"model", "prompt", "system", "images", "raw", "stream", "options", "format"}
        web.post("/api/embed", o.embed),                                     # body: {"model", "input", "dimensions"}
        web.post("/api/embeddings", o.embeddings),                           # body: {"model", "prompt"} (Ollama's older call)
        web.get("/", o.root),                                                # and HEAD: "Ollama is running"
    ]
