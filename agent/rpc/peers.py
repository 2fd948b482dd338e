"""Who is calling this agent, and what each caller may reach.

The paired agent's TLS accepts a client certificate its pinned CA signed (``agent.pairing
.enrollment.paired_ssl_context``); which one it is decides the rest, here, for every request:

- *the daemon*: the daemon certificate pinned while pairing (``identity/daemon.crt``), compared
  byte for byte (during a CA rotation the file pins the old and the new one: ``agent.trust``). An agent with no such pin (this machine's own agent, or one started with ``--ca``)
  takes a CA-signed certificate without server use as the daemon's: agent certificates carry
  server use, the daemon's client certificate does not. The daemon reaches every route.
- *a peer agent*: any other CA-signed certificate. Its node id is the SHA-256 of its certificate
  (DER), as the daemon knows it; it reaches the tunnel route of a grant that names that node id,
  and nothing else: 403 ``peer_not_allowed`` everywhere else, 403 ``grant_not_open`` on a tunnel
  whose grant is closed, unknown or names another node.

An app served without TLS (tests only: the agent always serves mutual TLS) has no callers to tell
apart; every request counts as the daemon's.
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID

from agent.problems import AgentProblem

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PEER = web.RequestKey("rpc_peer", object)  # the request's Peer, set by the gate


@dataclass(frozen=True)
class Peer:
    """The caller of one request."""

    daemon: bool
    node_id: str | None  # SHA-256 (DER) of its certificate; None without TLS


def node_id_of(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def _has_server_use(der: bytes) -> bool:
    try:
        usages = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    except (ValueError, x509.ExtensionNotFound):
        return False
    return ExtendedKeyUsageOID.SERVER_AUTH in usages.value


def read_pin(path: Path) -> bytes | None:
    """The (first) pinned daemon certificate (PEM file) as DER; None when this agent pins none."""
    pins = read_pins(path)
    return pins[0] if pins else None


def read_pins(path: Path) -> list[bytes]:
    """Every pinned daemon certificate (PEM file, one or more) as DER; [] when this agent pins none."""
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        return []
    return [cert.public_bytes(Encoding.DER) for cert in x509.load_pem_x509_certificates(pem)]


class PeerPolicy:
    """Tells the daemon from a peer agent by the client certificate of a TLS connection."""

    def __init__(self, daemon_pin_der: bytes | list[bytes] | None) -> None:
        self.repin(daemon_pin_der)

    def repin(self, daemon_pin_der: bytes | list[bytes] | None) -> None:
        """Pin these daemon certificates from the next request on (``agent.trust``); none: unpinned."""
        pins = [daemon_pin_der] if isinstance(daemon_pin_der, bytes) else list(daemon_pin_der or [])
        self._pins = frozenset(pins)

    def classify(self, der: bytes | None) -> Peer:
        if der is None:
            return Peer(daemon=True, node_id=None)
        node_id = node_id_of(der)
        if self._pins:
            return Peer(daemon=der in self._pins, node_id=node_id)
        return Peer(daemon=not _has_server_use(der), node_id=node_id)


def peer_certificate(request: web.Request) -> bytes | None:
    """The DER client certificate of the request's TLS connection; None on plain HTTP."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    return ssl_object.getpeercert(binary_form=True)


def refusal(code: str, message: str) -> web.Response:
    """A 403 in the agent's error shape."""
    return AgentProblem(message, status=403, code=code).response()


def peer_gate(policy: PeerPolicy, tunnel_route: str, grant_allows: Callable[[str, str], bool]) -> Callable[
        [web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The middleware: the daemon passes; a peer agent reaches ``tunnel_route`` (a canonical route
    with a ``{grant}`` part) for a grant ``grant_allows(grant, node_id)``, and nothing else."""

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = policy.classify(peer_certificate(request))
        request[PEER] = peer
        if peer.daemon:
            return await handler(request)
        resource = request.match_info.route.resource
        if resource is None or resource.canonical != tunnel_route:
            return refusal("peer_not_allowed", "this agent answers another node only on the RPC tunnel of a "
                                               "grant its daemon opened for it")
        grant = request.match_info.get("grant", "")
        if peer.node_id is None or not grant_allows(grant, peer.node_id):
            return refusal("grant_not_open", f"no open RPC grant {grant!r} for this node")
        return await handler(request)

    return gate
