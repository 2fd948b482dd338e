"""Trust that changes while the agent serves: the TLS context of every new handshake, and ``POST /trust``.

A CA rotation (``daemon.nodes.ca_rotation``) hands a paired agent new trust over the daemon's
mutual-TLS connection (``agent.api.trust``). The listening socket keeps the context it was opened
with; that context's SNI callback, run in every handshake (with or without a server name), hands
the connection the newest context (``LiveTls.current``), so the agent's certificate and the CAs it
trusts change for every new connection at once, without closing the server or any open connection
(and without touching a runtime). The peer gate's daemon pins change with it (``PeerPolicy.repin``).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from aiohttp import web
from pydantic import ValidationError

from agent.api.trust import TRUST_PATH, TrustInstalled, TrustUpdate
from agent.identity import AgentIdentity, IdentityError
from agent.pairing.enrollment import (
    daemon_pin_file,
    install_trust,
    paired_ssl_context,
    pinned_cas,
)
from agent.problems import AgentProblem
from agent.rpc.peers import PeerPolicy, read_pins

_LOGGER = logging.getLogger(__name__)


class LiveTls:
    """The context a server listens with, whose handshakes take the newest one of ``reload``."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.current = context
        self.listening = context
        context.sni_callback = self._pick

    def _pick(self, connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        if connection.context is not self.current:
            connection.context = self.current  # its certificate and its trust, for this handshake

    def reload(self, context: ssl.SSLContext) -> None:
        self.current = context


class TrustTarget:
    """What ``POST /trust`` changes: the identity the agent reports, its TLS, its daemon pins."""

    def __init__(self, identity: Callable[[], AgentIdentity], set_identity: Callable[[AgentIdentity], None],
                 tls: Callable[[], LiveTls | None], peers: PeerPolicy) -> None:
        self.identity = identity
        self.set_identity = set_identity
        self.tls = tls
        self.peers = peers

    def install(self, update: TrustUpdate) -> TrustInstalled:
        tls = self.tls()
        if tls is None:
            raise AgentProblem("this agent serves a fixed TLS context (not run by `mirbadllm agent`); restart it "
                               "with the new CA instead", status=409, code="trust_unsupported")
        paths = self.identity().paths
        try:
            identity = install_trust(paths, update.ca_pems, update.agent_cert_pem, update.daemon_cert_pems)
            context = paired_ssl_context(identity)
        except IdentityError as exc:
            raise AgentProblem(f"trust not installed: {exc}", status=422, code="bad_trust") from exc
        self.set_identity(identity)
        self.peers.repin(read_pins(daemon_pin_file(paths)))
        tls.reload(context)
        cas = len(pinned_cas(paths))
        _LOGGER.info("new trust installed: certificate %s, %d CA(s)", identity.node_id[:12], cas)
        return TrustInstalled(certificate_id=identity.node_id, trusted_cas=cas)


def routes(prefix: str, target: TrustTarget) -> list[web.RouteDef]:
    """``POST {prefix}/trust``: body ``TrustUpdate`` -> ``TrustInstalled`` (the daemon only: the peer gate)."""

    async def trust(request: web.Request) -> web.Response:
        try:
            update = TrustUpdate.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            raise AgentProblem(f"not a trust update: {exc}", status=422, code="bad_trust") from exc
        return web.json_response(target.install(update).model_dump(mode="json"))

    return [web.post(f"{prefix}{TRUST_PATH}", trust)]
