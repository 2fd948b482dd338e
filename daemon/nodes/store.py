"""Paired nodes on disk (``nodes.json``, atomic writes) and the TLS context that reaches each one.

A node record pins the exact agent certificate the daemon signed while pairing. The context for
that node trusts that one certificate and nothing else (``VERIFY_X509_PARTIAL_CHAIN`` with the
leaf as the only anchor): a certificate this CA signed for another node, or for a node since
removed, fails the handshake. Removing a node is deleting its record. A CA rotation
(``daemon.nodes.ca_rotation``) gives a node a new certificate but not a new id: during the
rotation's overlap the record pins both (``previous_certificate_pem``), after it the new one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from pathlib import Path

from cryptography import x509
from pydantic import BaseModel

from core.json_store import JsonStore, UnreadableStore
from core.key_store import load_cert_chain

_LOGGER = logging.getLogger(__name__)

DEFAULT_AGENT_PORT = 9443


class NodeRecord(BaseModel):
    """Storage shape of one paired node."""

    id: str
    name: str
    host: str
    port: int
    certificate_pem: str
    pairing_fingerprint: str = ""
    hostname: str = ""
    os: str = ""
    version: str = ""
    paired_at: float = 0.0
    previous_certificate_pem: str = ""  # a CA rotation's overlap: the old certificate, pinned too
    rotated_at: float = 0.0  # when a CA rotation last gave it a certificate (its id stays the first one's)

    @property
    def pinned_pem(self) -> str:
        """Every certificate the node may present now (two during a CA rotation's overlap)."""
        return self.certificate_pem + self.previous_certificate_pem

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def url(self) -> str:
        return f"https://{format_address(self.host, self.port)}"


class _NodesFile(BaseModel):
    version: int = 1
    nodes: list[NodeRecord] = []


def parse_address(text: str, default_port: int = DEFAULT_AGENT_PORT) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address → (host, port)."""
    raw = text.strip()
    if raw.startswith("https://"):
        raw = raw[len("https://"):].rstrip("/")
    host, port = raw, default_port
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"'{text}' is not an address: a '[' without ']'")
        host, rest = raw[1:end], raw[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"'{text}' is not an address")
            port = _port(rest[1:], text)
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
        port = _port(port_text, text)
    if not host or any(ch in host for ch in "/ @?#"):
        raise ValueError(f"'{text}' is not an address: give host or host:port")
    return host, port


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"'{whole}' has no valid port")
    return int(text)


def format_address(host: str, port: int) -> str:
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"


def issued_by(cert_pem: str, ca: x509.Certificate) -> bool:
    try:
        x509.load_pem_x509_certificate(cert_pem.encode()).verify_directly_issued_by(ca)
        return True
    except Exception:  # noqa: BLE001 - unreadable, foreign or forged: all mean "not ours"
        return False


def node_ssl_context(node_cert_pem: str, client_cert: Path, client_key: Path) -> ssl.SSLContext:
    """Mutual TLS 1.3 to one node: our client certificate, and only its pinned certificate trusted."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False  # a node is its certificate, whatever address it is reached at
    ctx.load_verify_locations(cadata=node_cert_pem)
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    load_cert_chain(ctx, client_cert, client_key)  # the key may be encrypted (core.key_store)
    return ctx


class NodeStore:
    """The paired nodes by id, written atomically on every change."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._store = JsonStore(path, _NodesFile)
        self._nodes: dict[str, NodeRecord] = {}
        self._lock = asyncio.Lock()

    def load(self) -> None:
        try:
            data = self._store.read()
        except UnreadableStore as exc:
            backup = self._store.set_aside()
            _LOGGER.error("nodes.json was unreadable (%s); kept it as %s: pair the nodes again", exc, backup)
            return
        if data is None:
            return
        self._nodes = {n.id: n for n in data.nodes}

    def _save(self) -> None:
        self._store.write(_NodesFile(nodes=list(self._nodes.values())))

    def all(self) -> list[NodeRecord]:
        return list(self._nodes.values())

    def get(self, node_id: str) -> NodeRecord | None:
        return self._nodes.get(node_id)

    async def put(self, record: NodeRecord) -> None:
        async with self._lock:
            self._nodes[record.id] = record
            self._save()

    async def remove(self, node_id: str) -> NodeRecord | None:
        async with self._lock:
            record = self._nodes.pop(node_id, None)
            if record is not None:
                self._save()
            return record
