"""Advertising an unpaired agent on the LAN: one ``_mirbadllm._tcp`` service over mDNS (zeroconf).

The TXT record carries the node name, the certificate fingerprint the user compares, the version
and ``state=unpaired``. Nothing secret is in it. All zeroconf work runs on the event loop through
its asyncio API; a machine where multicast does not work still pairs by address, so a failure to
advertise is a warning, not an error. ``MIRBADLLM_NO_MDNS=1`` (or ``--no-mdns``) turns it off.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket

from agent.api.pairing import SERVICE_TYPE

_LOGGER = logging.getLogger(__name__)

NO_MDNS_ENV = "MIRBADLLM_NO_MDNS"


def mdns_disabled_by_env() -> bool:
    return os.environ.get(NO_MDNS_ENV, "") not in ("", "0", "false")


def advertised_addresses(host: str, interfaces: list[str]) -> list[str]:
    """The IPv4 addresses to put in the record: the interfaces asked for, the bound host, or all."""
    if interfaces:
        return list(interfaces)
    if host not in ("", "0.0.0.0", "::"):
        return [host]
    import ifaddr  # zeroconf's own dependency

    found = [ip.ip for adapter in ifaddr.get_adapters() for ip in adapter.ips
             if isinstance(ip.ip, str) and not ipaddress.ip_address(ip.ip).is_loopback]
    return found or ["127.0.0.1"]


def _label(text: str) -> str:
    """A DNS-SD instance label: printable, at most 63 bytes."""
    clean = "".join(ch if ch.isalnum() or ch in "-_ " else "-" for ch in text).strip() or "agent"
    return clean[:50]


class Advertiser:
    """Registers the service on ``start`` and withdraws it (with a goodbye) on ``stop``."""

    def __init__(self, name: str, fingerprint: str, version: str, port: int, addresses: list[str],
                 interfaces: list[str] | None = None) -> None:
        self.name = name
        self.fingerprint = fingerprint
        self.version = version
        self.port = port
        self.addresses = addresses
        self.interfaces = interfaces or []
        self._zc: object | None = None
        self._info: object | None = None

    async def start(self) -> bool:
        try:
            from zeroconf import InterfaceChoice, IPVersion, ServiceInfo
            from zeroconf.asyncio import AsyncZeroconf

            instance = f"{_label(self.name)} {self.fingerprint[:8]}.{SERVICE_TYPE}"
            info = ServiceInfo(
                SERVICE_TYPE, instance, port=self.port,
                addresses=[socket.inet_aton(a) for a in self.addresses],
                properties={"name": self.name, "fp": self.fingerprint, "version": self.version,
                            "state": "unpaired", "api": "1"},
                server=f"{_label(socket.gethostname()).replace(' ', '-')}-{self.fingerprint[:8]}.local.")
            zc = AsyncZeroconf(interfaces=self.interfaces or InterfaceChoice.All, ip_version=IPVersion.V4Only)
            self._zc = zc
            await zc.async_register_service(info)  # announces in the background
            self._info = info
        except Exception as exc:  # noqa: BLE001 - no multicast is normal on some networks
            _LOGGER.warning("cannot advertise on the LAN (mDNS): %s; pair this agent by its address", exc)
            await self.stop()
            return False
        _LOGGER.info("advertising %s on %s", SERVICE_TYPE, ", ".join(self.addresses))
        return True

    async def stop(self) -> None:
        zc, self._zc = self._zc, None
        if zc is None:
            return
        try:
            await zc.async_close()  # type: ignore[attr-defined] # says goodbye for the service
        except Exception as exc:  # noqa: BLE001 - withdrawing is best effort
            _LOGGER.debug("mDNS shutdown: %s", exc)
        self._info = None
