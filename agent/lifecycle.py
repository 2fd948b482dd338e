"""The agent's two lives on one port: waiting to be paired, then serving its daemon over mutual TLS.

``AgentLifecycle.run`` loops: an unpaired agent serves only the pairing routes (self-signed TLS,
mDNS advertisement, a code on the console) until a daemon completes pairing; then that server
closes and the mutual-TLS app of ``agent.server`` opens on the same port. When the daemon removes
the node (``POST /agent/v1/unpair``) the identity is reset and the agent is unpaired again, with
a new key and a new code. Runtimes keep running across these switches and are adopted again.

stdout gets one JSON line per event (``listening``, ``pairing``, ``paired``, ``unpaired``) for a
parent process; a person reads the banner on stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from agent.api.pairing import short_fingerprint
from agent.deps import AgentDeps
from agent.discovery import Advertiser, advertised_addresses
from agent.identity import IdentityError, load_or_create_identity
from agent.pairing.enrollment import (
    is_paired,
    paired_ssl_context,
    pairing_ssl_context,
    reset_identity,
)
from agent.pairing.server import create_pairing_app
from agent.pairing.service import PairingService
from agent.paths import AgentPaths
from agent.server import create_app, start_server
from agent.service.pairing_code import ShownCode, forget_code, write_code
from agent.trust import LiveTls
from core.tasks import cancel_and_wait

_LOGGER = logging.getLogger(__name__)


def emit_json(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def print_banner(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


class AgentLifecycle:
    def __init__(self, paths: AgentPaths, host: str, port: int, build: Callable[[], AgentDeps], *,
                 name: str, version: str, allow_pairing: bool = True, mdns: bool = True,
                 mdns_interfaces: list[str] | None = None,
                 emit: Callable[[dict[str, Any]], None] = emit_json,
                 banner: Callable[[str], None] = print_banner) -> None:
        self.paths = paths
        self.host = host
        self.port = port  # 0 until the first bind; every later phase reuses the port it got
        self.build = build
        self.name = name
        self.version = version
        self.allow_pairing = allow_pairing
        self.mdns = mdns
        self.mdns_interfaces = list(mdns_interfaces or [])
        self.emit = emit
        self.banner = banner
        self._where = f"{host}:{port}"
        self._fingerprint = ""

    async def run(self, stop: asyncio.Event) -> int:
        while not stop.is_set():
            if is_paired(self.paths):
                ok = await self._serve_paired(stop)
            elif not self.allow_pairing:
                self.banner(f"mirbadllm agent: not paired. No CA is pinned in {self.paths.ca_file}. Pair "
                            "this agent with a daemon, or start it with --ca FILE (the daemon's CA certificate).")
                return 2
            else:
                ok = await self._serve_pairing(stop)
            if not ok:
                return 1
        return 0

    async def _listen(self, app: Any, ssl_context: Any) -> Any:
        try:
            runner, port = await start_server(app, self.host, self.port, ssl_context)
        except OSError as exc:  # the port is taken, most likely
            self.banner(f"mirbadllm agent: cannot listen on {self.host}:{self.port}: {exc}")
            return None
        self.port = port
        return runner

    async def _serve_paired(self, stop: asyncio.Event) -> bool:
        deps = self.build()
        unpair = asyncio.Event()
        deps.on_unpair = unpair.set
        try:
            deps.tls = LiveTls(paired_ssl_context(deps.identity))  # POST /trust swaps it (agent.trust)
        except IdentityError as exc:
            self.banner(f"mirbadllm agent: {exc}")
            return False
        runner = await self._listen(create_app(deps), deps.tls.listening)
        if runner is None:
            return False
        node_id = deps.identity.node_id
        _LOGGER.info("agent %s listening on %s:%d (home %s)", node_id[:12], self.host, self.port, self.paths.home)
        self.emit({"event": "listening", "host": self.host, "port": self.port, "node_id": node_id, "paired": True})
        try:
            await _first(stop, unpair)
        finally:
            if not unpair.is_set():
                _LOGGER.info("agent stopping; runtimes keep running")
            await runner.cleanup()
        if unpair.is_set():
            reset_identity(self.paths)
            _LOGGER.warning("the daemon removed this node: unpaired, waiting to be paired again")
            self.emit({"event": "unpaired", "node_id": node_id})
        return True

    async def _serve_pairing(self, stop: asyncio.Event) -> bool:
        identity = load_or_create_identity(self.paths, common_name=self.name)
        self._fingerprint = identity.node_id
        service = PairingService(identity, self.name, self.version, on_code=self._show_code)
        paired = asyncio.Event()
        runner = await self._listen(create_pairing_app(service, lambda _r: paired.set()),
                                    pairing_ssl_context(identity))
        if runner is None:
            return False
        addresses = advertised_addresses(self.host, self.mdns_interfaces)
        self._where = f"{addresses[0]}:{self.port}"
        _LOGGER.info("agent waiting to be paired on %s:%d (home %s)", self.host, self.port, self.paths.home)
        self.emit({"event": "listening", "host": self.host, "port": self.port, "node_id": identity.node_id,
                   "paired": False})
        service.announce()
        advertiser = Advertiser(self.name, identity.node_id, self.version, self.port, addresses,
                                self.mdns_interfaces) if self.mdns else None
        if advertiser is not None:
            await advertiser.start()
        rotation = asyncio.ensure_future(service.run())
        try:
            await _first(stop, paired)
        finally:
            forget_code(self.paths.pairing_code_file)
            await cancel_and_wait(rotation)
            if advertiser is not None:
                await advertiser.stop()
            await runner.cleanup()
        if service.paired is not None:
            self.emit({"event": "paired", "node_id": service.paired.node_id})
            self.banner(f"Paired. This node's id is {service.paired.node_id[:16]}…; serving its daemon "
                        f"over mutual TLS on port {self.port}.")
        return True

    def _show_code(self, code: str, expires_in_s: float) -> None:
        fp = self._fingerprint
        self.emit({"event": "pairing", "code": code, "fingerprint": fp, "name": self.name,
                   "expires_in_s": round(expires_in_s)})
        where = self._where
        write_code(self.paths.pairing_code_file,
                   ShownCode(code, short_fingerprint(fp), self.name, where, time.time() + expires_in_s))
        self.banner("\n".join([
            f'MirbadLLM agent "{self.name}" is waiting to be paired ({where}).',
            f"  Pairing code:  {code}   (valid {max(1, round(expires_in_s / 60))} minutes, one use)",
            f"  Fingerprint:   {short_fingerprint(fp)}   (the app must show the same)",
            f"  Pair it in the app (Nodes → Pair a node) or: mirbadllm ctl nodes pair {where} {code}",
        ]))
