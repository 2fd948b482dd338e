"""The main node's side: one loopback listener per helper, each connection carried through its tunnel.

``RpcForwards.open`` binds, synchronously, one listening socket per ``RpcPeer`` on 127.0.0.1 (a
port the OS picks) and serves it: every connection llama-server makes there becomes a WebSocket to
the helper's tunnel route (``agent.api.rpc.rpc_tunnel_path``) over mutual TLS, with this agent's
own certificate as client certificate; the helper must present a certificate from the pinned CA
whose SHA-256 (DER) is the node id the peer names, or the connection is dropped before one byte of
RPC goes out. The ``ForwardSet`` it answers gives llama-server its ``--rpc`` endpoints; its
``close`` (the model's llama-server exited) and ``RpcForwards.close_all`` (the agent goes away)
close the listeners and every connection through them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from agent.api.models import API_PREFIX
from agent.api.rpc import RpcPeer, rpc_tunnel_path
from agent.identity import AgentIdentity
from agent.rpc.tunnel import HEARTBEAT_S, MAX_FRAME, pipe
from agent.runtimes.ports import LOOPBACK
from core.key_store import load_cert_chain

_LOGGER = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 15.0


class PeerMismatch(Exception):
    """The helper presented another certificate than its node id names."""


def peer_client_context(identity: AgentIdentity) -> ssl.SSLContext:
    """TLS 1.3 with this agent's certificate as client certificate; the helper verified against the
    pinned CA alone (its node id is checked after the handshake: names are not)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(identity.paths.ca_file))
    load_cert_chain(ctx, identity.paths.cert_file, identity.paths.key_file)  # the key may be encrypted
    return ctx


def tunnel_url(peer: RpcPeer) -> str:
    return f"{peer.agent_url.rstrip('/')}{API_PREFIX}{rpc_tunnel_path(peer.grant_id)}"


class _Listener:
    """A loopback socket that already listens, served as soon as the loop runs again (a
    connection made before then waits in its backlog): a synchronous ``asyncio.start_server``."""

    def __init__(self, sock: socket.socket,
                 handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]) -> None:
        loop = asyncio.get_running_loop()

        def factory() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), handle)  # type: ignore[arg-type]

        self._sock = sock
        self._task = loop.create_task(loop.create_server(factory, sock=sock, start_serving=True))

    def close(self) -> None:
        if self._task.done() and not self._task.cancelled() and self._task.exception() is None:
            self._task.result().close()
        else:
            self._task.cancel()
            self._sock.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            server = await self._task
            await server.wait_closed()


@dataclass
class _Forward:
    peer: RpcPeer
    port: int
    server: _Listener | None = None
    connections: set[asyncio.Task[None]] = field(default_factory=set)


class ForwardSet:
    """One model's forwards: ``endpoints`` for ``--rpc``; ``close`` ends them all."""

    def __init__(self, owner: RpcForwards, instance_id: str, forwards: list[_Forward]) -> None:
        self.owner = owner
        self.instance_id = instance_id
        self.forwards = forwards

    @property
    def endpoints(self) -> list[str]:
        return [f"{LOOPBACK}:{f.port}" for f in self.forwards]

    def stop_listening(self) -> None:
        for forward in self.forwards:
            if forward.server is not None:
                forward.server.close()
            for task in forward.connections:
                task.cancel()

    async def close(self) -> None:
        """Stop listening and end every connection through these forwards."""
        self.owner.sets.discard(self)
        self.stop_listening()
        for forward in self.forwards:
            for task in list(forward.connections):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if forward.server is not None:
                with contextlib.suppress(Exception):
                    await forward.server.wait_closed()
        _LOGGER.info("instance %s: RPC forwards closed", self.instance_id)


class RpcForwards:
    """The forwards of every model on this node that runs across nodes."""

    def __init__(self, context: Callable[[], ssl.SSLContext]) -> None:
        self._context = context
        self._ssl: ssl.SSLContext | None = None
        self._session: aiohttp.ClientSession | None = None
        self.sets: set[ForwardSet] = set()

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if self._ssl is None:
                self._ssl = self._context()
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=0, force_close=True)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def open(self, instance_id: str, peers: list[RpcPeer]) -> ForwardSet:
        """Listen on loopback for each peer, in order (synchronously: llama-server may connect at once)."""
        if self._ssl is None:
            self._ssl = self._context()  # a broken identity fails the start here, not a connection later
        forwards: list[_Forward] = []
        try:
            for peer in peers:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind((LOOPBACK, 0))
                    sock.listen(16)
                    sock.setblocking(False)
                except OSError:
                    sock.close()
                    raise
                forward = _Forward(peer=peer, port=int(sock.getsockname()[1]))
                forward.server = _Listener(sock, self._handler(forward))
                forwards.append(forward)
        except BaseException:
            ForwardSet(self, instance_id, forwards).stop_listening()
            raise
        opened = ForwardSet(self, instance_id, forwards)
        self.sets.add(opened)
        _LOGGER.info("instance %s: RPC forwards %s", instance_id,
                     ", ".join(f"{LOOPBACK}:{f.port} -> {f.peer.agent_url} (grant {f.peer.grant_id})"
                               for f in forwards))
        return opened

    def _handler(self, forward: _Forward) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                forward.connections.add(task)
            try:
                await self._carry(forward.peer, reader, writer)
            finally:
                if task is not None:
                    forward.connections.discard(task)

        return handle

    async def _carry(self, peer: RpcPeer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ws = await self._session_now().ws_connect(
                tunnel_url(peer), max_msg_size=MAX_FRAME, autoping=True, heartbeat=HEARTBEAT_S,
                timeout=aiohttp.ClientWSTimeout(ws_close=5.0), ssl=self._ssl or True)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            _LOGGER.warning("RPC tunnel to %s (grant %s) refused: %s", peer.agent_url, peer.grant_id, exc)
            writer.close()
            return
        try:
            ssl_object = ws.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if isinstance(ssl_object, ssl.SSLObject) else None
            if der is None or hashlib.sha256(der).hexdigest() != peer.node_id:
                raise PeerMismatch(f"{peer.agent_url} is not node {peer.node_id[:12]}")
        except PeerMismatch as exc:
            _LOGGER.warning("RPC tunnel refused: %s", exc)
            await ws.close()
            writer.close()
            return
        await pipe(ws, reader, writer)

    async def close_all(self) -> None:
        """The agent is going away: every forward ends (a split model loses its helpers)."""
        for opened in list(self.sets):
            await opened.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
