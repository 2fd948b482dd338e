"""CA rotation: a new CA for the daemon, every reachable agent switched to it, then the old one retired.

1. *Prepare*: a new CA and a daemon client certificate from it are made in ``pki/ca-next/`` (kept
   there until retirement, so a rotation that stopped midway resumes with the same new CA).
2. *Overlap*, node by node (and this machine's agent): the agent is handed, over the daemon's
   existing mutual-TLS link, a certificate from the new CA for its own key, both CAs to trust and
   both daemon certificates to pin (``agent.api.trust``); the node record pins the old and the new
   certificate; a fresh connection with the new client certificate and the new certificate alone
   proves the switch. A node that is not online is named offline and left alone.
3. *Retirement*, only when every node that answered switched: the new CA and client certificate
   become the daemon's (``pki/ca.*``, ``pki/daemon-client.*``), each agent is told to trust the new
   CA alone and pin the new client certificate, and each link is made again with them.

A node keeps its id (the certificate it was paired with); its new certificate's id goes to the rpc
helpers (``NodeManager.on_certificate``). When a node fails in step 2, step 3 does not run: the old
CA stays the daemon's, every agent still trusts it, and the daemon reaches every node as before.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from agent.api.client import AgentClient, AgentError
from agent.api.models import IDENTITY_CERT_FILE
from agent.api.trust import TrustUpdate
from core.json_store import write_atomic
from daemon.api.ca_rotation import CaRotationResult, NodeRotation
from daemon.api.models import LOCAL_NODE
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.history import History
from daemon.nodes.ca_files import PENDING_CA_DIR, install_pending
from daemon.nodes.manager import NodeManager
from daemon.nodes.store import NodeRecord, issued_by, node_ssl_context
from daemon.pki import (
    CA_CERT_FILE,
    CertificateAuthority,
    cert_pem,
    fingerprint,
)
from daemon.tls import client_ssl_context, ensure_client_certificate

_LOGGER = logging.getLogger(__name__)

PENDING_DIR = PENDING_CA_DIR
BOTH_CAS_FILE = "trust.crt"  # the old and the new CA: what the local link trusts during the overlap
LOCAL_HOSTS = ["127.0.0.1", "localhost", "::1"]


@dataclass
class _Switched:
    record: NodeRecord | None  # None: this machine's agent
    certificate_pem: str


class CaRotation:
    """Runs one CA rotation at a time (``rotate``)."""

    def __init__(self, nodes: NodeManager, pki_dir: Path, events: EventBus, history: History,
                 local_identity_dir: Path | None = None) -> None:
        self._nodes = nodes
        self._pki = pki_dir
        self._events = events
        self._history = history
        self._local_identity = local_identity_dir  # this machine's agent, written by daemon.tls
        self.running = False

    def _refuse_now(self) -> None:
        if self.running:
            raise DaemonProblem(409, "ca_rotation_running", "A CA rotation is running already; wait for its "
                                "result.")
        if self._nodes.pairing_busy:
            raise DaemonProblem(409, "pairing_in_progress", "A node is being paired; rotate the CA once the "
                                "pairing has finished (its certificate would come from the CA being retired).")

    async def rotate(self) -> CaRotationResult:
        self._refuse_now()  # checked and claimed with no await between: one rotation, no pairing meanwhile
        self.running = self._nodes.rotating = True
        try:
            return await self._rotate()
        finally:
            self.running = self._nodes.rotating = False

    async def _rotate(self) -> CaRotationResult:
        started = time.monotonic()
        old = self._nodes.ca
        assert old is not None
        pending = self._pki / PENDING_DIR
        pending.mkdir(mode=0o700, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
        new = CertificateAuthority.load_or_create(pending, name=f"MirbadLLM local CA ({stamp})")
        new_client = ensure_client_certificate(new, pending)
        self._nodes.extra_cas = [new.cert]  # the records pin certificates of either CA from now on
        ca_pems = [cert_pem(old.cert).decode(), cert_pem(new.cert).decode()]
        write_atomic(pending / BOTH_CAS_FILE, "".join(ca_pems).encode(), 0o644)
        pins = [self._nodes.client_files[1].read_text(), new_client[1].read_text()]
        result = CaRotationResult(old_ca=fingerprint(old.cert), new_ca=fingerprint(new.cert), retired=False)
        _LOGGER.info("CA rotation: %s -> %s", result.old_ca[:12], result.new_ca[:12])
        switched: list[_Switched] = []
        for target in self._targets():
            step = await self._switch(target, new, ca_pems, pins, new_client, switched)
            result.nodes.append(step)
            self._events.publish("nodes.ca_rotation", None, node=step.node, name=step.name, outcome=step.outcome)
        failed = [n for n in result.nodes if n.outcome == "failed"]
        result.offline = [n.name for n in result.nodes if n.outcome == "offline"]
        if failed:
            result.problem = (f"{', '.join(n.name for n in failed)} did not switch to the new CA; the old CA stays "
                              "in use and trusted everywhere. Fix that and rotate again (it resumes).")
        else:
            await self._retire(new, pending, switched, result)
        result.seconds = round(time.monotonic() - started, 3)
        await self._history.audit("admin", "node.ca_rotation", result.new_ca,
                                  f"{'retired' if result.retired else 'not retired'} {result.old_ca[:12]}; "
                                  f"offline: {', '.join(result.offline) or 'none'}")
        return result

    def _targets(self) -> list[NodeRecord | None]:
        local = [None] if self._local_identity is not None and LOCAL_NODE in self._nodes.links else []
        return local + sorted(self._nodes.store.all(), key=lambda r: r.name.lower())

    async def _switch(self, record: NodeRecord | None, new: CertificateAuthority, ca_pems: list[str],
                      pins: list[str], new_client: tuple[Path, Path], switched: list[_Switched]) -> NodeRotation:
        """Step 2 for one node: its new certificate, both CAs trusted, the switch proven."""
        node_id = record.id if record is not None else LOCAL_NODE
        name = record.name if record is not None else "this machine"
        began = time.monotonic()
        link = self._nodes.links.get(node_id)
        if link is None or not link.online:
            return NodeRotation(node=node_id, name=name, outcome="offline",
                                message="not reached: pair it again (`mirbadllm agent --unpair` there, remove it "
                                        "here, pair it)")
        issued = self._issue(new, self._current_pem(record), local=record is None)
        if record is not None:
            record = record.model_copy(update={"certificate_pem": issued, "rotated_at": time.time(),
                                               "previous_certificate_pem": record.previous_certificate_pem
                                               or record.certificate_pem})
            await self._nodes.store.put(record)  # pinned before it is sent: an answer lost is no lock-out
        # The link trusts the old and the new certificate from now on, so no call of it fails meanwhile.
        self._relink(record, self._pki / PENDING_DIR / BOTH_CAS_FILE, self._nodes.client_files)
        try:
            installed = await self._nodes.links[node_id].client.install_trust(TrustUpdate(
                ca_pems=ca_pems, agent_cert_pem=issued, daemon_cert_pems=pins if record is not None else []))
            await self._prove(link.client.base_url, issued, new_client)
        except AgentError as exc:
            _LOGGER.warning("CA rotation: %s did not switch: %s", name, exc.message)
            return NodeRotation(node=node_id, name=name, outcome="failed", message=exc.message,
                                seconds=round(time.monotonic() - began, 3))
        self._nodes.on_certificate(node_id, installed.certificate_id)
        switched.append(_Switched(record, issued))
        return NodeRotation(node=node_id, name=name, outcome="rotated", certificate_id=installed.certificate_id,
                            seconds=round(time.monotonic() - began, 3))

    def _current_pem(self, record: NodeRecord | None) -> str:
        if record is not None:
            return record.certificate_pem
        assert self._local_identity is not None
        return (self._local_identity / IDENTITY_CERT_FILE).read_text()

    @staticmethod
    def _issue(new: CertificateAuthority, current_pem: str, *, local: bool) -> str:
        """A certificate from ``new`` for the key of ``current_pem`` (the agent's key never changes)."""
        if issued_by(current_pem, new.cert):
            return current_pem  # a resumed rotation: this node switched already
        current = x509.load_pem_x509_certificate(current_pem.encode())
        key = current.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise DaemonProblem(409, "bad_node_key", "a node's certificate is not for an EC key; pair it again")
        names = current.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        name = str(names[0].value) if names else "mirbadllm-agent"
        return cert_pem(new.sign(key, name, server=True, client=True, hosts=LOCAL_HOSTS if local else None)).decode()

    @staticmethod
    async def _prove(url: str, issued: str, new_client: tuple[Path, Path]) -> None:
        """A new connection with the new client certificate, trusting only the new certificate: the
        agent switched (AgentError when not)."""
        key, cert = new_client
        probe = AgentClient(url, node_ssl_context(issued, cert, key))
        try:
            status = await probe.status()
        finally:
            await probe.close()
        if status.node_id != fingerprint(x509.load_pem_x509_certificate(issued.encode())):
            raise AgentError(0, "not_switched", f"{url} shows another certificate than the new one")

    def _relink(self, record: NodeRecord | None, local_trust: Path, client: tuple[Path, Path]) -> None:
        """The node's link from now on: what its record pins (this machine's: the CAs in ``local_trust``),
        with the daemon's client certificate ``client``; calls under way finish on the old one."""
        if record is not None:
            self._nodes.swap_client(record.id, self._nodes.node_client(record, client))
            return
        link = self._nodes.links.get(LOCAL_NODE)
        if link is not None:
            key, cert = client
            self._nodes.swap_client(LOCAL_NODE, AgentClient(link.client.base_url,
                                                            client_ssl_context(local_trust, key, cert)))

    async def _retire(self, new: CertificateAuthority, pending: Path, switched: list[_Switched],
                      result: CaRotationResult) -> None:
        """Step 3: the new CA becomes the daemon's; every switched agent trusts it alone."""
        ca, (key_path, cert_path) = install_pending(self._pki)
        self._nodes.use_ca(ca, (key_path, cert_path))
        new_pem, pin = cert_pem(new.cert).decode(), cert_path.read_text()
        for done in switched:
            node_id = done.record.id if done.record is not None else LOCAL_NODE
            if done.record is not None:
                done.record = done.record.model_copy(update={"previous_certificate_pem": ""})
                await self._nodes.store.put(done.record)
            # The new client certificate first (the agent pins both until told), then the new CA alone.
            self._relink(done.record, self._pki / CA_CERT_FILE, (key_path, cert_path))
            try:
                await self._nodes.links[node_id].client.install_trust(TrustUpdate(
                    ca_pems=[new_pem], agent_cert_pem=done.certificate_pem,
                    daemon_cert_pems=[pin] if done.record is not None else []))
            except (AgentError, KeyError) as exc:
                node = next(n for n in result.nodes if n.node == node_id)
                node.message = f"it still trusts the old CA too ({exc}); harmless: that CA's key is gone"
        for offline in result.nodes:
            if offline.outcome == "offline" and offline.node != LOCAL_NODE:
                await self._nodes.detach(offline.node)  # its certificate is from the retired CA: pair it again
        result.retired = True
        _LOGGER.info("CA rotation: retired %s; the daemon's CA is %s", result.old_ca[:12], result.new_ca[:12])
