"""``DaemonDeps``: every part of the daemon, built in one place, and each handed exactly what it uses.

``build_deps`` is the daemon's composition root, as ``agent.deps`` is the agent's: no part builds
another or reaches through one for a third. The facts several parts read have one owner each and are
handed around as typed collaborators: ``Links`` (which nodes answer now, ``daemon.nodes.links``),
``Maintenance`` (models a job owns, ``daemon.models.maintenance``), the ``RestartBook``
(``daemon.models.restarts``) and the ``Listener`` (where the daemon listens, ``daemon.listener``).
``handlers`` builds the API handlers for the one route table (``daemon.routes``); ``start`` and
``stop`` run the parts' lifecycles in order. ``daemon.server`` turns this into the aiohttp app;
tests build it around a temporary home.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agent.api.client import AgentClient
from agent.api.runtimes import profile
from daemon import admin_token
from daemon.admin import AdminApi
from daemon.api.program import program_version
from daemon.api.sources import Transfer
from daemon.audit.api import AuditApi
from daemon.audit.log import AuditLog
from daemon.audit.system import record_system_events
from daemon.background import Background
from daemon.backup.api import BackupApi
from daemon.backup.files import ModelFiles
from daemon.backup.restore import Owners
from daemon.backup.schedule import BackupScheduler
from daemon.backup.service import BackupService
from daemon.config import DaemonConfig
from daemon.conversations.api import ConversationsApi
from daemon.conversations.store import ConversationStore
from daemon.events import EventBus
from daemon.files.api import NodeFilesApi
from daemon.files.disk import NodeDisk
from daemon.fleet_metrics.collector import FleetCollector
from daemon.fleet_metrics.discovery import PrometheusTargets
from daemon.history import History
from daemon.jobs.api import JobsApi
from daemon.jobs.manager import JobManager
from daemon.keys import KeyStore
from daemon.listener import Listener
from daemon.models.api import ModelsApi
from daemon.models.health import HealthMonitor
from daemon.models.maintenance import Maintenance
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry, assemble_demo_gguf
from daemon.models.restarts import RestartBook
from daemon.nodes.api import NodesApi
from daemon.nodes.backends import NodeBackends
from daemon.nodes.ca_files import finish_interrupted_retirement
from daemon.nodes.ca_rotation import CaRotation
from daemon.nodes.links import AgentLink, Links
from daemon.nodes.local_agent import LocalAgentProcess
from daemon.nodes.manager import NodeManager
from daemon.ollama.api import OllamaApi
from daemon.ollama.facts import ModelFacts
from daemon.paths import DaemonPaths
from daemon.pki import CertificateAuthority
from daemon.probes import Probes
from daemon.router.metrics import RouterMetrics
from daemon.router.router import Router
from daemon.routes import Handlers
from daemon.runtimes.api import RuntimeUpgradesApi
from daemon.runtimes.manager import RuntimeUpgradeManager
from daemon.runtimes.packs import RuntimePacks
from daemon.services.api import ServicesApi
from daemon.services.policy_api import ServicesPolicyApi
from daemon.sources.api import SourcesApi
from daemon.sources.hub import Hub
from daemon.sources.hub_api import HubApi
from daemon.sources.mirror import Mirror, MirrorApi
from daemon.sources.registration import Registered, register_models
from daemon.sources.transfer_log import TransferLog
from daemon.sources.transfers import Transfers
from daemon.sources.updates import ModelUpdates
from daemon.sources.updates_api import ModelUpdatesApi
from daemon.telemetry import TelemetryCollector
from daemon.tls import (
    KeysAtRestReader,
    client_ssl_context,
    ensure_client_certificate,
    ensure_local_agent_identity,
)
from daemon.tracing import router_tracing
from daemon.upgrades.api import UpgradesApi
from daemon.upgrades.manager import UpgradeManager

MAINTENANCE_S = 60.0


@dataclass
class DaemonDeps:
    config: DaemonConfig
    paths: DaemonPaths
    admin_token: str
    listener: Listener
    background: Background
    events: EventBus
    registry: Registry
    keys: KeyStore
    history: History
    audit: AuditLog  # the recorder of admin actions (daemon.audit.log): hand it to a feature that records
    metrics: RouterMetrics
    links: Links
    maintenance: Maintenance
    orchestrator: Orchestrator
    router: Router
    health: HealthMonitor
    telemetry: TelemetryCollector
    nodes: NodeManager
    upgrades: UpgradeManager
    runtime_upgrades: RuntimeUpgradeManager
    runtime_packs: RuntimePacks
    jobs: JobManager
    transfers: Transfers
    mirror: Mirror
    backups: BackupService
    backup_scheduler: BackupScheduler
    model_updates: ModelUpdates  # hub models' newer revisions, update and roll back (daemon.sources.updates)
    conversations: ConversationStore  # saved chats of the Playground and `mirbadllm run` (daemon.conversations)
    shutdown_requested: asyncio.Event = field(default_factory=asyncio.Event)  # `mirbadllm daemon` exits on it
    local_agent: LocalAgentProcess | None = None  # this machine's agent, once started


def smoke_model_on(registry: Registry, node: str) -> str | None:
    """The file of the first llama.cpp model registered on ``node`` (a rolled-out build's smoke test)."""
    return next((d.model_path for d in sorted(registry.all(), key=lambda d: d.id)
                 if d.node == node and profile(d.runtime).reads_gguf), None)


def build_deps(config: DaemonConfig, paths: DaemonPaths) -> DaemonDeps:
    """The daemon's parts for ``config`` and the home ``paths`` (created where missing)."""
    paths.ensure()
    token = admin_token.load_or_create(paths.admin_token)
    background, events, links, maintenance = Background(), EventBus(config.event_ring), Links(), Maintenance()
    history, keys, metrics = History(paths.history), KeyStore(paths.keys), RouterMetrics()
    registry = Registry(paths.models)
    audit = AuditLog(paths.history)
    history.recorder = audit  # History.audit's callers record through it
    backends = NodeBackends(paths.node_backends)  # each node's backend choice, sent with every launch
    # a model a job holds shows it, and refuses a Start
    orchestrator = Orchestrator(registry, events, RestartBook(paths.home), links, backends.choice, maintenance)
    router = Router(orchestrator, links, maintenance, keys, config, history, metrics,
                    tracing=router_tracing(config.tracing))  # None unless [tracing] enabled
    health = HealthMonitor(orchestrator, links, maintenance, config.health, router.in_flight)
    orchestrator.on_state_change(health.observe)
    router.on_stall = health.stream_stalled  # an answer cut for silence flags the model; repeated: a crash
    telemetry = TelemetryCollector(links, history, config.history_interval_s)
    nodes = NodeManager(config.nodes, paths.pki, paths.nodes, links, orchestrator, registry, telemetry, events,
                        history, backends)
    registry.known_nodes = nodes.names  # a model is saved only on a node that exists
    registry.node_offers = nodes.offers  # ...and that offers its runtime (when it says)
    nodes.on_certificate = orchestrator.rpc.identify  # a CA rotation's new certificate: the id rpc grants name
    metrics.registry.register(FleetCollector(router.gates.waiting, registry.get, telemetry.hosts, nodes.names))
    registry.node_lends = nodes.lends  # ...and helpers of one model across nodes have an rpc-server
    upgrades = UpgradeManager(paths.home, config.upgrades, nodes.views, links, events, history)
    runtime_upgrades = RuntimeUpgradeManager(paths.home, nodes.views, links, events, history,
                                             lambda node: smoke_model_on(registry, node))
    packs = RuntimePacks(config.release_feed_url, program_version(), paths.home, nodes.views,
                         runtime_upgrades.install_on, lambda type_, **data: events.publish(type_, None, **data))
    nodes.pack_state = packs.state  # each node's GPU runtime pack, in /api/nodes
    jobs = JobManager(registry, orchestrator, links, maintenance, events, router.in_flight, telemetry, paths.home)

    async def register(transfer: Transfer, query: Any) -> Registered:
        return await register_models(registry, events, history, transfer, query)

    transfers = Transfers(links, events, history, register, background.spawn, TransferLog(paths.home / "transfers.json"))
    mirror = Mirror(links, transfers, registry, events, history, paths.local_agent_home / "models", background.spawn)
    listener = Listener(config, paths)
    jobs.router_url = lambda: listener.local_url  # a benchmark's overhead rounds go through /v1 here
    files = ModelFiles(links, transfers, registry, events, history, orchestrator.start, background.spawn,
                       paths.local_agent_home / "models")  # a restore's missing model files
    backups = BackupService(Owners(registry, keys, nodes.store, config, listener.apply, paths.pki, events),
                            paths.home, audit, files)
    return DaemonDeps(config=config, paths=paths, admin_token=token, listener=listener,
                      background=background, events=events, registry=registry, keys=keys, history=history,
                      audit=audit, metrics=metrics, links=links, maintenance=maintenance, orchestrator=orchestrator,
                      router=router, health=health, telemetry=telemetry, nodes=nodes, upgrades=upgrades,
                      runtime_upgrades=runtime_upgrades, runtime_packs=packs, jobs=jobs,
                      transfers=transfers, mirror=mirror,
                      backups=backups, backup_scheduler=BackupScheduler(backups, config, events),
                      model_updates=ModelUpdates(registry, orchestrator, links, transfers, events, history, Hub()),
                      conversations=ConversationStore(paths.conversations))


def handlers(d: DaemonDeps) -> Handlers:
    """The API handlers of the route table, each given only the parts it answers from."""
    disk = NodeDisk(d.links, d.registry.all, d.nodes.names)  # a node's model files (daemon.files)
    return Handlers(
        probes=Probes(d.registry, d.orchestrator, d.metrics),
        router=d.router,
        admin=AdminApi(d.config, d.listener, d.registry, d.orchestrator, lambda: d.router.stats, d.telemetry,
                       d.events, d.keys, d.history, d.shutdown_requested,
                       KeysAtRestReader(d.paths.pki, d.paths.local_agent_home / "identity"
                                        if d.config.local_agent else None)),
        models=ModelsApi(d.registry, d.orchestrator, d.links, d.events, d.history, disk),
        sources=SourcesApi(d.links, d.transfers, d.history, d.mirror, d.nodes.backends.choice, d.registry,
                           d.nodes.names),
        jobs=JobsApi(d.jobs, d.registry, d.links, d.history),
        nodes=NodesApi(d.nodes, d.history, d.audit, CaRotation(d.nodes, d.paths.pki, d.events, d.history, (
            d.paths.local_agent_home / "identity") if d.config.local_agent else None)),
        upgrades=UpgradesApi(d.upgrades),
        runtime_upgrades=RuntimeUpgradesApi(d.runtime_upgrades),
        mirror=MirrorApi(d.mirror),
        services=ServicesApi(d.links, d.audit, d.paths.home / "services.json"),
        services_policy=ServicesPolicyApi(d.links, d.audit, d.paths.home / "services.json"),
        backup=BackupApi(d.backups),
        audit=AuditApi(d.audit),
        prometheus=PrometheusTargets(d.nodes.views),
        files=NodeFilesApi(disk, d.history),
        hub=HubApi(Hub(), d.telemetry.hosts),
        model_updates=ModelUpdatesApi(d.model_updates, d.orchestrator),
        conversations=ConversationsApi(d.conversations))


def ollama(d: DaemonDeps) -> OllamaApi:
    """The Ollama API's handlers (``daemon.ollama``): they call /v1 where this machine reaches it."""
    return OllamaApi(d.registry, d.orchestrator, ModelFacts(d.links, d.orchestrator, d.paths.models),
                     lambda: d.listener.local_url)


# --- lifecycle -------------------------------------------------------------------------------------
async def start(d: DaemonDeps) -> None:
    finish_interrupted_retirement(d.paths.pki)  # before anything reads pki/ (daemon.nodes.ca_files)
    d.background.spawn(admin_token.store_in_keychain(d.paths.home, d.admin_token))
    d.keys.load()
    d.orchestrator.book.load()
    if not d.registry.load() and d.config.seed_demo_model:
        models_dir = d.paths.local_agent_home / "models"
        gguf = await asyncio.get_running_loop().run_in_executor(None, assemble_demo_gguf, models_dir)
        if gguf is not None:
            d.registry.seed_demo(gguf)
    await d.history.open()
    await d.audit.open()
    await d.conversations.open()
    await d.router.open()
    if d.config.local_agent:
        await _start_local_agent(d)
    d.background.spawn(d.telemetry.run())
    d.background.spawn(d.orchestrator.auto_start())
    d.background.spawn(d.health.run())
    d.background.spawn(d.runtime_packs.run())  # CUDA for a node with an NVIDIA GPU (daemon.runtimes.packs)
    d.background.spawn(d.orchestrator.watch_external())  # probes external endpoints (and closes their session)
    d.background.spawn(_housekeeping(d.history, d.keys, d.audit, d.config))
    d.background.spawn(record_system_events(d.events, d.audit, d.events.last_id))  # evictions, restarts: system
    await d.nodes.start()
    d.background.spawn(d.jobs.recover())
    d.background.spawn(d.backup_scheduler.run())
    d.background.spawn(d.model_updates.run())  # daily: has the hub a newer revision of a model's files


async def _start_local_agent(d: DaemonDeps) -> None:
    ca = CertificateAuthority.load_or_create(d.paths.pki)
    key, cert = ensure_client_certificate(ca, d.paths.pki)
    certificate_id = ensure_local_agent_identity(ca, d.paths.local_agent_home / "identity")
    d.orchestrator.rpc.identify("local", certificate_id)  # the id a helper's grant names when it is a main node
    d.local_agent = LocalAgentProcess(d.paths.local_agent_home, d.paths.logs / "agent.log", d.config.llama_server,
                                      d.config.telemetry_interval_s, d.config.runtime_first_port)
    await d.local_agent.spawn()
    d.background.spawn(d.local_agent.supervise())
    client = AgentClient(d.local_agent.url, client_ssl_context(d.paths.pki / "ca.crt", key, cert))
    link = AgentLink("local", client, d.orchestrator.on_instances, d.config.local_agent_retry_max_s)
    d.links.add(link)
    d.background.spawn(link.run())


async def _housekeeping(history: History, keys: KeyStore, audit: AuditLog, config: DaemonConfig) -> None:
    while True:
        await asyncio.sleep(1.0)
        await history.flush()
        keys.flush_usage()
        if int(time.monotonic()) % int(MAINTENANCE_S) == 0:
            await history.maintain()
            await audit.prune(config.audit_retention_days)  # the setting may change at run time


async def stop(d: DaemonDeps) -> None:
    await d.jobs.close()  # a running job restores its model while the links still work
    await d.upgrades.close()
    await d.runtime_upgrades.close()
    await d.nodes.stop()
    await d.background.cancel_all()
    for link in d.links:
        await link.client.close()
    if d.local_agent is not None:
        await d.local_agent.stop()  # models keep running; the next agent adopts them
    await d.router.close()
    await d.orchestrator.external.close()
    d.keys.flush_usage()
    await d.history.close()
    await d.audit.close()
    await d.conversations.close()
