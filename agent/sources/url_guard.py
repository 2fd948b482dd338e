"""Where a download may connect: public addresses only, checked after DNS and on every redirect.

A download URL comes from a user, a repo or a redirect, so it may point at this machine's own
services, the LAN, or a cloud metadata endpoint (SSRF: LocalAI#10665, Open WebUI CVE-2026-45401).
``UrlPolicy.check_url`` judges the parsed URL that will be fetched (scheme, no credentials, an IP
literal's address); ``GuardedResolver`` judges every address a host name resolves to *at connect
time*, so a name that answers differently the second time (DNS rebinding) is still caught, and
nothing is dialled that was not checked. Loopback, private, link-local (169.254.169.254 included),
CGNAT, ULA, multicast, reserved and unspecified addresses are refused, IPv4 inside IPv6 too,
unless the agent was started with ``--allow-private-sources`` or the origin is a trusted one
(the configured Hugging Face endpoint).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from agent.problems import AgentProblem

SCHEMES = ("http", "https")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class SourceRefused(AgentProblem, status=422, code="source_refused"):
    """A download source this node will not connect to."""


def embedded_v4(ip: Address) -> Address:
    """The IPv4 address hidden in a mapped, 6to4, Teredo or NAT64 IPv6 address, else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def is_public(ip: Address) -> bool:
    inner = embedded_v4(ip)
    return all(a.is_global and not a.is_multicast for a in {ip, inner})


@dataclass(frozen=True)
class UrlPolicy:
    """What one download may reach; ``trusted`` origins (scheme, host, port) skip the address check."""

    allow_private: bool = False
    trusted: frozenset[tuple[str, str, int]] = field(default_factory=frozenset)

    def is_trusted(self, url: URL) -> bool:
        return (url.scheme, (url.host or "").lower(), url.port or 0) in self.trusted

    def host_trusted(self, host: str, port: int) -> bool:
        return any(h == host.lower() and p == port for _s, h, p in self.trusted)

    def check_url(self, raw: str | URL) -> URL:
        """The parsed URL to fetch, or SourceRefused; the same object is then used for the request."""
        try:
            url = raw if isinstance(raw, URL) else URL(raw, encoded=False)
        except (ValueError, TypeError) as exc:
            raise SourceRefused(f"not a valid URL: {exc}") from exc
        if url.scheme not in SCHEMES:
            raise SourceRefused(f"only http and https downloads are allowed, not {url.scheme or 'no scheme'!r}")
        if url.user is not None or url.password is not None:
            raise SourceRefused("a download URL may not carry a user name or password")
        if not url.host:
            raise SourceRefused("the download URL has no host")
        if self.is_trusted(url):
            return url
        try:
            literal = ipaddress.ip_address(url.host.strip("[]"))
        except ValueError:
            return url  # a name: its addresses are checked when it is resolved, before connecting
        self.check_address(url.host, literal)
        return url

    def check_address(self, host: str, ip: Address) -> None:
        if self.allow_private or is_public(ip):
            return
        raise SourceRefused(f"refusing to download from {host} ({ip}): a loopback, private, link-local "
                            "or otherwise non-public address. Start the agent with --allow-private-sources "
                            "to fetch from your own network.", details={"host": host, "address": str(ip)})


class GuardedResolver(AbstractResolver):
    """Resolves through ``inner`` and refuses the whole answer if any address is not allowed."""

    def __init__(self, policy: UrlPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        if not self.policy.host_trusted(host, port):
            for result in results:
                self.policy.check_address(host, ipaddress.ip_address(result["host"]))
        return results

    async def close(self) -> None:
        await self.inner.close()


async def precheck(policy: UrlPolicy, url: URL, resolver: AbstractResolver) -> None:
    """Resolve a host name once before any request, so a refusal comes before any connection."""
    if policy.is_trusted(url) or url.host is None:
        return
    try:
        ipaddress.ip_address(url.host.strip("[]"))
        return  # a literal, checked by check_url
    except ValueError:
        pass
    try:
        results = await resolver.resolve(url.host, url.port or 0, socket.AF_UNSPEC)
    except OSError as exc:
        raise SourceRefused(f"cannot resolve {url.host}: {exc}", status=502, code="source_unreachable") from exc
    for result in results:
        policy.check_address(url.host, ipaddress.ip_address(result["host"]))
