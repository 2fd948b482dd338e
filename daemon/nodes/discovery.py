"""Agents waiting to be paired: found on the LAN by mDNS, or added by address.

``Discovery`` keeps the entries (keyed by certificate fingerprint) and, when enabled, browses for
``_mirbadllm._tcp`` with zeroconf's asyncio API on the daemon's own loop: the browser's callbacks
only schedule a resolve task, so nothing blocks. Multicast is optional: ``nodes.discovery = false``
in the config, or ``MIRBADLLM_NO_MDNS=1``, turns browsing off; adding by address always works.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from agent.api.pairing import SERVICE_TYPE, short_fingerprint
from daemon.api.nodes import DiscoveredNode
from daemon.nodes.store import format_address

_LOGGER = logging.getLogger(__name__)

NO_MDNS_ENV = "MIRBADLLM_NO_MDNS"
MANUAL_KEEP_S = 1800.0
RESOLVE_TIMEOUT_MS = 3000


def mdns_disabled_by_env() -> bool:
    return os.environ.get(NO_MDNS_ENV, "") not in ("", "0", "false")


def entry_from_service(name: str, addresses: list[str], port: int, properties: dict[bytes, bytes | None],
                       now: float) -> DiscoveredNode | None:
    """A resolved ``_mirbadllm._tcp`` service as an entry; None when it is not an unpaired agent."""
    def prop(key: str) -> str:
        value = properties.get(key.encode())
        return value.decode("utf-8", "replace") if value else ""

    fp = prop("fp").lower()
    if len(fp) != 64 or any(c not in "0123456789abcdef" for c in fp) or not addresses or not port:
        return None
    if prop("state") not in ("", "unpaired"):
        return None
    host = addresses[0]
    return DiscoveredNode(name=prop("name") or name.split(".")[0], address=format_address(host, port),
                          host=host, port=port, fingerprint=fp, short_fingerprint=short_fingerprint(fp),
                          version=prop("version"), source="mdns", seen_at=now)


class Discovery:
    """The discovered list, and the mDNS browser that feeds it."""

    def __init__(self, on_change: Callable[[str, DiscoveredNode], None], *,
                 interfaces: list[str] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.entries: dict[str, DiscoveredNode] = {}
        self._by_service: dict[str, str] = {}
        self._on_change = on_change
        self._interfaces = interfaces or []
        self._clock = clock
        self._zc: Any = None
        self._browser: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- entries -------------------------------------------------------------------------------
    def put(self, entry: DiscoveredNode) -> None:
        known = self.entries.get(entry.fingerprint)
        self.entries[entry.fingerprint] = entry
        if known is None or known.address != entry.address:
            _LOGGER.info("discovered agent %r at %s (%s)", entry.name, entry.address, entry.source)
            self._on_change("node.discovered", entry)

    def drop(self, fingerprint: str) -> None:
        entry = self.entries.pop(fingerprint, None)
        if entry is not None:
            self._on_change("node.vanished", entry)

    def listing(self, paired: set[str]) -> list[DiscoveredNode]:
        now = self._clock()
        for fp, entry in list(self.entries.items()):
            if entry.source == "manual" and now - entry.seen_at > MANUAL_KEEP_S:
                del self.entries[fp]
        return sorted((e for e in self.entries.values() if e.fingerprint not in paired), key=lambda e: e.name)

    # --- mDNS ----------------------------------------------------------------------------------
    async def start(self) -> bool:
        try:
            from zeroconf import InterfaceChoice, IPVersion
            from zeroconf.asyncio import AsyncServiceBrowser, AsyncZeroconf

            self._zc = AsyncZeroconf(interfaces=self._interfaces or InterfaceChoice.All,
                                     ip_version=IPVersion.V4Only)
            self._browser = AsyncServiceBrowser(self._zc.zeroconf, [SERVICE_TYPE], handlers=[self._on_service])
        except Exception as exc:  # noqa: BLE001 - no multicast here: adding by address still works
            _LOGGER.warning("LAN discovery (mDNS) is unavailable: %s; add nodes by address", exc)
            await self.stop()
            return False
        _LOGGER.info("looking for agents on the LAN (%s)", ", ".join(self._interfaces) or "all interfaces")
        return True

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        browser, self._browser = self._browser, None
        zc, self._zc = self._zc, None
        try:
            if browser is not None:
                await browser.async_cancel()
            if zc is not None:
                await zc.async_close()
        except Exception as exc:  # noqa: BLE001 - shutting down
            _LOGGER.debug("mDNS shutdown: %s", exc)

    def _on_service(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        """Called by zeroconf on our loop; resolving is a task of its own."""
        if state_change.name == "Removed":
            fp = self._by_service.pop(name, None)
            if fp is not None:
                self.drop(fp)
            return
        task = asyncio.get_running_loop().create_task(self._resolve(zeroconf, service_type, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, zeroconf: Any, service_type: str, name: str) -> None:
        from zeroconf.asyncio import AsyncServiceInfo

        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(zeroconf, RESOLVE_TIMEOUT_MS):
            _LOGGER.debug("could not resolve %s", name)
            return
        entry = entry_from_service(name, info.parsed_addresses(), info.port or 0, dict(info.properties),
                                   self._clock())
        if entry is None:
            return
        self._by_service[name] = entry.fingerprint
        self.put(entry)
