"""The fleet beyond this machine: paired nodes, their links and monitor, discovery, pairing, removal.

Each paired node gets an ``AgentClient`` whose pooled keep-alive mTLS session pins that node's
certificate (``daemon.nodes.store.node_ssl_context``) and a ``NodeLink`` in the daemon's ``Links`` under
its node id, so placement (``ModelDefinition.node``), the router's proxy path and the telemetry
collector reach it exactly as they reach the local agent. ``NodeMonitor`` decides online /
degraded / offline. ``Discovery`` lists agents waiting to be paired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol

from cryptography import x509

from agent.api.backends import BackendChoice
from agent.api.client import AgentClient, AgentError
from agent.api.models import InstanceInfo
from agent.api.pairing import short_fingerprint
from agent.api.runtimes import RuntimeOffer
from daemon.api.models import LOCAL_NODE, ModelDefinition, ModelState, ModelStatus
from daemon.api.nodes import (
    DiscoveredNode,
    NodeAddResult,
    NodePairRequest,
    NodeState,
    NodeView,
    PackState,
    node_pick,
    refusal,
)
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.history import History
from daemon.nodes.backends import NodeBackends
from daemon.nodes.ca_files import PENDING_CA_DIR
from daemon.nodes.discovery import Discovery, mdns_disabled_by_env
from daemon.nodes.links import Links, NodeLink
from daemon.nodes.monitor import NodeHealth, NodeMonitor, NodePolicy
from daemon.nodes.pairing import PairingFailed, pair, probe
from daemon.nodes.store import (
    NodeRecord,
    NodeStore,
    format_address,
    issued_by,
    node_ssl_context,
    parse_address,
)
from daemon.pki import CertificateAuthority, fingerprint
from daemon.telemetry import TelemetryCollector
from daemon.tls import ensure_client_certificate

_LOGGER = logging.getLogger(__name__)

FIRST_CONTACT_S = 10.0
OLD_CLIENT_GRACE_S = 300.0  # a swapped-out node client stays open this long for its requests under way
UNREADABLE = "its certificate in nodes.json cannot be read: remove it here and pair it again"
UNTRUSTED = ("its certificate is from a CA this daemon no longer trusts (rotated while it was offline): run "
             "`mirbadllm agent --unpair` there, remove it here and pair it again")


class ModelDefinitions(Protocol):
    """The saved models (``daemon.models.registry.Registry``), as the node manager reads them."""

    def all(self) -> list[ModelDefinition]: ...


class ModelLives(Protocol):
    """What the node manager asks of the models' owner (``daemon.models.orchestrator.Orchestrator``):
    a model's status, a stop, and a node's instances as its agent reports them. ``daemon.deps``
    wires the two; ``daemon.nodes`` never imports ``daemon.models``."""

    def status(self, definition: ModelDefinition) -> ModelStatus: ...

    async def stop(self, model_id: str, *, keep_wanted: bool = False) -> ModelStatus: ...

    def on_instances(self, node_id: str, _instances: dict[str, InstanceInfo]) -> None: ...


class NodeManager:
    def __init__(self, policy: NodePolicy, pki_dir: Path, nodes_file: Path, links: Links,
                 orchestrator: ModelLives, registry: ModelDefinitions, telemetry: TelemetryCollector,
                 events: EventBus, history: History, backends: NodeBackends | None = None) -> None:
        self.policy = policy
        self.backends = backends if backends is not None else NodeBackends(nodes_file.with_name("node_backends.json"))
        # node id -> its GPU runtime pack's state (daemon.runtimes.packs; set by daemon.deps)
        self.pack_state: Callable[[str], PackState | None] = lambda _node: None
        self._pki_dir = pki_dir
        self.store = NodeStore(nodes_file)
        self.links = links  # paired nodes join (and leave) the daemon's links here
        self._orchestrator = orchestrator
        self._registry = registry
        self._telemetry = telemetry
        self._events = events
        self._history = history
        self.monitor = NodeMonitor(links, policy, events)
        self.discovery = Discovery(self._discovery_event, interfaces=self.policy.mdns_interfaces)
        self.ca: CertificateAuthority | None = None
        self._client: tuple[Any, Any] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pairing = asyncio.Lock()
        self.rotating = False  # a CA rotation runs (daemon.nodes.ca_rotation): pairing waits for it
        # CAs trusted besides ``ca``: the new one during a rotation's overlap (set by daemon.nodes.ca_rotation)
        self.extra_cas: list[x509.Certificate] = []
        # node id, its certificate's id: told when a rotation gives a node a certificate (rpc grants name it)
        self.on_certificate: Callable[[str, str], None] = lambda _node, _certificate_id: None

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self.ca = CertificateAuthority.load_or_create(self._pki_dir)
        self._client = ensure_client_certificate(self.ca, self._pki_dir)  # (key, cert)
        pending = self._pki_dir / PENDING_CA_DIR / "ca.crt"
        if pending.exists():  # a rotation stopped in its overlap: nodes it switched hold the new CA's certificates
            self.extra_cas = [x509.load_pem_x509_certificate(pending.read_bytes())]
        self.store.load()
        for record in self.store.all():
            try:
                x509.load_pem_x509_certificate(record.certificate_pem.encode())
            except ValueError:  # a damaged nodes.json: that node is offline, the daemon serves the rest
                _LOGGER.error("node %s in nodes.json holds no certificate that can be read; ignored (remove it "
                              "and pair it again)", record.id[:12])
                self.monitor.health[record.id] = NodeHealth(state=NodeState.OFFLINE, reason=UNREADABLE)
                continue
            if self._attach(record) is None:
                self.monitor.health[record.id] = NodeHealth(state=NodeState.OFFLINE, reason=UNTRUSTED)
            elif record.rotated_at:
                self.on_certificate(record.id, fingerprint(x509.load_pem_x509_certificate(
                    record.certificate_pem.encode())))
        if self.policy.discovery and not mdns_disabled_by_env():
            await self.discovery.start()
        self._tasks.append(asyncio.get_running_loop().create_task(self.monitor.run(), name="node-monitor"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.discovery.stop()
        for link in self.links:
            if isinstance(link, NodeLink):
                await link.stop()

    @property
    def pairing_busy(self) -> bool:
        """Whether a node is being paired right now."""
        return self._pairing.locked()

    @property
    def client_files(self) -> tuple[Path, Path]:
        """The daemon's client (key, certificate) files."""
        assert self._client is not None
        return self._client[0], self._client[1]

    def use_ca(self, ca: CertificateAuthority, client: tuple[Path, Path]) -> None:
        """Make ``ca`` the daemon's CA and ``client`` its client certificate (a CA rotation's retirement)."""
        self.ca, self._client, self.extra_cas = ca, client, []

    def trusts(self, certificate_pem: str) -> bool:
        """Whether a CA this daemon trusts now signed the certificate."""
        assert self.ca is not None
        return any(issued_by(certificate_pem, ca) for ca in [self.ca.cert, *self.extra_cas])

    def node_client(self, record: NodeRecord, client: tuple[Path, Path] | None = None) -> AgentClient:
        """A client for the node: what its record pins, with the daemon's client (key, certificate) now
        or ``client``."""
        key, cert = client or self.client_files
        return AgentClient(record.url, node_ssl_context(record.pinned_pem, cert, key))

    def swap_client(self, node_id: str, client: AgentClient) -> None:
        """Give the node's link ``client`` for every call from now on, without a gap; the old client's
        requests under way (a streamed answer, the long-poll) finish on it, closed after a grace."""
        self._tasks = [task for task in self._tasks if not task.done()]
        link = self.links.get(node_id)
        if link is None:
            self._tasks.append(asyncio.get_running_loop().create_task(client.close()))
            return
        old, link.client = link.client, client
        self._tasks.append(asyncio.get_running_loop().create_task(_close_later(old), name="close-old-client"))

    def _attach(self, record: NodeRecord) -> NodeLink | None:
        assert self.ca is not None and self._client is not None
        cert = x509.load_pem_x509_certificate(record.certificate_pem.encode())
        if (fingerprint(cert) != record.id and not record.rotated_at) or not self.trusts(record.certificate_pem):
            _LOGGER.error("node %s in nodes.json does not hold a certificate this daemon's CA signed; ignored "
                          "(pair it again)", record.id[:12])
            return None
        link = NodeLink(record.id, self.node_client(record), self._orchestrator.on_instances)
        self.links.add(link)
        link.start()
        return link

    async def detach(self, node_id: str) -> None:
        """Drop the node's link, keeping its record (a CA rotation left it with a certificate nothing trusts)."""
        await self._detach(node_id)
        self.monitor.health[node_id] = NodeHealth(state=NodeState.OFFLINE, reason=UNTRUSTED)

    async def _detach(self, node_id: str) -> None:
        link = self.links.pop(node_id)
        if isinstance(link, NodeLink):
            await link.stop()
        if link is not None:
            await link.client.close()
        self.monitor.forget(node_id)

    # --- views ---------------------------------------------------------------------------------
    def views(self) -> list[NodeView]:
        local = [self.view(LOCAL_NODE)] if LOCAL_NODE in self.links else []
        return local + sorted((self.view(r.id) for r in self.store.all()), key=lambda v: v.name.lower())

    def view(self, node_id: str) -> NodeView:
        record = self.store.get(node_id)
        if record is None and not (node_id == LOCAL_NODE and node_id in self.links):
            raise DaemonProblem(404, "node_not_found", f"no paired node with id '{node_id}'")
        health = self.monitor.health.get(node_id) or NodeHealth()
        status, sample = health.status, self._telemetry.latest.get(node_id)
        view = NodeView(
            id=node_id, name=record.name if record else (status.hostname if status else socket.gethostname()),
            local=record is None, address=record.address if record else None, state=health.state,
            reason=health.reason, latency_ms=health.latency_ms, last_seen=health.last_seen,
            models=[d.id for d in self._registry.all() if d.node == node_id],
            paired_at=record.paired_at if record else None,
            fingerprint=record.pairing_fingerprint if record else None)
        if status is not None:
            view = view.model_copy(update={
                "hostname": status.hostname, "os": status.os, "arch": status.arch, "version": status.version,
                "cpu_count": status.cpu_count, "memory_total": status.memory_total,
                "memory_available": status.memory_available, "gpus": status.gpus,
                "runtimes": status.runtime_offers, "keys_at_rest": status.keys_at_rest})
        choice = self.backends.choice(node_id)
        pick = node_pick(choice, view.runtimes)
        view = view.model_copy(update={"backend_choice": choice, "backend": pick.backend if pick else None,
                                       "backend_why": pick.why if pick else None,
                                       "runtime_pack": self.pack_state(node_id)})
        if sample is not None:
            view = view.model_copy(update={
                "cpu_percent": sample.cpu_percent, "memory_total": sample.memory_total,
                "memory_used": sample.memory_used, "memory_available": sample.memory_available,
                "gpus": sample.gpus or view.gpus})
        return view

    async def set_backend(self, node_id: str, choice: BackendChoice) -> tuple[BackendChoice, NodeView]:
        """Keep the node's backend choice; a GPU backend only where the node's build has it and it
        sees a device (422 naming what the node has), never while the node cannot say (409).
        Returns the choice it replaced and the node as it is now. No running model restarts. A node
        that does not exist is bad input here (422 naming the nodes there are), as the other two are."""
        known = self.names()
        if node_id not in known:
            there = ", ".join(f"{name} ({nid})" for nid, name in sorted(known.items())) or "none is paired"
            raise DaemonProblem(422, "node_not_found", f"no node with id '{node_id}' to set a backend on; the "
                                f"nodes: {there}")
        refused = refusal(node_id, choice, self.offers(node_id))
        if refused is not None:
            raise DaemonProblem(*refused)
        before = await self.backends.set(node_id, choice)
        return before, self.view(node_id)

    def offers(self, node_id: str) -> list[RuntimeOffer] | None:
        """What the node's agent last said of its runtimes while it answered; None when it does not
        answer now (offline, or no status yet) or says nothing of them (an agent older than offers)."""
        health = self.monitor.health.get(node_id)
        if health is None or health.status is None or health.state not in (NodeState.ONLINE, NodeState.DEGRADED):
            return None
        return list(health.status.runtime_offers) or None

    def lends(self, node_id: str) -> bool | None:
        """Whether the node's agent has llama.cpp's rpc-server, so it can hold part of a model that
        runs on another node (``AgentStatus.rpc_server``); None when it does not answer now."""
        health = self.monitor.health.get(node_id)
        if health is None or health.status is None or health.state not in (NodeState.ONLINE, NodeState.DEGRADED):
            return None
        return health.status.rpc_server is not None

    def names(self) -> dict[str, str]:
        """Every node a model may be placed on, id -> name (the registry refuses any other)."""
        names = {LOCAL_NODE: socket.gethostname()} if LOCAL_NODE in self.links else {}
        names.update({r.id: r.name for r in self.store.all()})
        return names

    def discovered(self) -> list[DiscoveredNode]:
        return self.discovery.listing({r.pairing_fingerprint for r in self.store.all()})

    def _discovery_event(self, type_: str, entry: DiscoveredNode) -> None:
        self._events.publish(type_, None, name=entry.name, address=entry.address,
                              fingerprint=entry.fingerprint, source=entry.source)

    # --- actions -------------------------------------------------------------------------------
    def _address(self, text: str) -> tuple[str, int]:
        try:
            return parse_address(text)
        except ValueError as exc:
            raise DaemonProblem(422, "invalid_address", str(exc)) from exc

    async def add_address(self, address: str) -> NodeAddResult:
        """Look at an address: an agent waiting to be paired becomes a discovered entry; a node of
        ours that moved gets its new address; a node this daemon removed is refused."""
        assert self.ca is not None and self._client is not None
        host, port = self._address(address)
        key, cert = self._client
        try:
            found = await probe(host, port, self.ca, set(self._by_certificate()), (str(cert), str(key)))
        except PairingFailed as exc:
            raise DaemonProblem(exc.status, exc.code, exc.message) from exc
        where = format_address(host, port)
        if found.kind == "unpaired" and found.info is not None:
            entry = DiscoveredNode(name=found.info.name, address=where, host=host, port=port,
                                   fingerprint=found.fingerprint, short_fingerprint=short_fingerprint(found.fingerprint),
                                   version=found.info.version, hostname=found.info.hostname, source="manual",
                                   seen_at=time.time())
            self.discovery.put(entry)
            return NodeAddResult(discovered=entry)
        if found.kind == "ours":
            record = self.store.get(self._by_certificate()[found.fingerprint])
            assert record is not None
            if (record.host, record.port) != (host, port):
                _LOGGER.info("node %s moved from %s to %s", record.name, record.address, where)
                record = record.model_copy(update={"host": host, "port": port})
                await self.store.put(record)
                await self._detach(record.id)
                self._attach(record)
                await self._history.audit("admin", "node.address", record.id, where)
            return NodeAddResult(node=self.view(record.id))
        _refuse(found.kind, where)

    def _by_certificate(self) -> dict[str, str]:
        """The id of every certificate a paired node may present -> the node's id (they differ once a
        CA rotation gave it a new certificate)."""
        known: dict[str, str] = {}
        for record in self.store.all():
            for cert in x509.load_pem_x509_certificates(record.pinned_pem.encode()):
                known[fingerprint(cert)] = record.id
        return known

    async def _refuse_if_paired(self, host: str, port: int) -> None:
        """Pairing found no pairing endpoint: if an agent answers there anyway it is paired already
        (ours, removed, or another daemon's), a conflict with its state (409), not a bad gateway."""
        assert self.ca is not None and self._client is not None
        key, cert = self._client
        try:
            found = await probe(host, port, self.ca, set(self._by_certificate()), (str(cert), str(key)))
        except PairingFailed:
            return  # nothing answers: the caller's 502 stands
        if found.kind == "ours":
            raise DaemonProblem(409, "already_paired", f"The agent at {format_address(host, port)} is already paired "
                          "with this daemon.")
        if found.kind != "unpaired":
            _refuse(found.kind, format_address(host, port))

    async def pair(self, request: NodePairRequest) -> NodeView:
        assert self.ca is not None and self._client is not None
        host, port = self._address(request.address)
        client_cert_pem = self._client[1].read_text(encoding="utf-8")
        if self.rotating:
            raise DaemonProblem(409, "ca_rotation_running", "The daemon's CA is being replaced; pair the node "
                                "once the rotation has finished.")
        async with self._pairing:
            try:
                paired = await pair(host, port, request.code.get_secret_value(), request.fingerprint, self.ca,
                                    client_cert_pem)
            except PairingFailed as exc:
                _LOGGER.warning("pairing with %s failed: %s", format_address(host, port), exc.code)
                if exc.code == "node_unreachable":
                    await self._refuse_if_paired(host, port)  # an agent answers, but only over mutual TLS
                raise DaemonProblem(exc.status, exc.code, exc.message) from exc
            record = NodeRecord(id=paired.node_id, name=paired.info.name, host=host, port=port,
                                certificate_pem=paired.certificate_pem,
                                pairing_fingerprint=request.fingerprint.lower(), hostname=paired.info.hostname,
                                os=paired.info.os, version=paired.info.version, paired_at=time.time())
            await self.store.put(record)
            self.discovery.drop(record.pairing_fingerprint)
            link = self._attach(record)
        _LOGGER.info("paired node %r (%s) at %s", record.name, record.id[:12], record.address)
        self._events.publish("node.paired", None, node=record.id, name=record.name, address=record.address)
        await self._history.audit("admin", "node.pair", record.id, f"{record.name} at {record.address}", after=record)
        if link is not None:
            with contextlib.suppress(TimeoutError):  # it is switching to mutual TLS: give it a moment
                await asyncio.wait_for(link.first_sync.wait(), FIRST_CONTACT_S)
            await self.monitor.check(record.id, link)
        return self.view(record.id)

    async def remove(self, node_id: str) -> bool:
        """Stop the node's models, tell its agent to unpair, forget it. True if the agent was told."""
        if node_id == LOCAL_NODE:
            raise DaemonProblem(409, "cannot_remove_local", "This machine's own agent cannot be removed; run the "
                          "daemon with --no-local-agent instead.")
        record = self.store.get(node_id)
        if record is None:
            raise DaemonProblem(404, "node_not_found", f"no paired node with id '{node_id}'")
        link = self.links.get(node_id)
        told = False
        if link is not None and link.online:
            for definition in self._registry.all():
                if definition.node == node_id and \
                        self._orchestrator.status(definition).state != ModelState.STOPPED:
                    try:
                        await self._orchestrator.stop(definition.id)
                    except Exception as exc:  # noqa: BLE001 - removal goes on regardless
                        _LOGGER.warning("could not stop %s on the removed node: %s", definition.id, exc)
            try:
                await link.client.unpair()
                told = True
            except AgentError as exc:
                _LOGGER.warning("could not tell node %s to unpair (%s): run `mirbadllm agent --unpair` there",
                                record.name, exc.message)
        await self._detach(node_id)
        await self.store.remove(node_id)
        await self.backends.forget(node_id)
        self._orchestrator.on_instances(node_id, {})
        _LOGGER.info("removed node %r (%s)", record.name, node_id[:12])
        self._events.publish("node.removed", None, node=node_id, name=record.name, agent_unpaired=told)
        await self._history.audit("admin", "node.remove", node_id, record.name, before=record)
        return told


async def _close_later(client: AgentClient) -> None:
    try:
        await asyncio.sleep(OLD_CLIENT_GRACE_S)
    finally:
        await client.close()


def _refuse(kind: str, where: str) -> NoReturn:
    """The 409 for an agent at ``where`` that cannot be paired: a removed node of ours, or another's."""
    if kind == "removed":
        raise DaemonProblem(409, "node_removed", f"The agent at {where} holds a certificate from this daemon for a "
                      "node that was removed; it is refused. Run `mirbadllm agent --unpair` on that "
                      "machine, then pair it again.")
    raise DaemonProblem(409, "not_pairable", f"The agent at {where} is not waiting to be paired: it is paired with "
                  "another daemon, or it is not a MirbadLLM agent.")
