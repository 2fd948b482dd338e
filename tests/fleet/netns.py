"""A network namespace joined to the test's own by a veth pair: a "remote machine" on a wire we own.

Addresses come from 10.x.y.0/30, chosen at random so concurrent test runs do not meet, and never
one that overlaps a route or address the host already has. A blackhole route for that /30 (worse
metric than the veth's own) makes sure traffic for it never leaves through the default route,
whatever state the veth is in. ``destroy`` kills what runs inside, deletes the namespace, the host
end of the veth and the blackhole route, and is safe to call on a half-built namespace.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

_LOGGER = logging.getLogger(__name__)

BLACKHOLE_METRIC = "9999"


class NamespaceUnavailable(Exception):
    """This machine (or this user) cannot make network namespaces."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=20)
    if check and result.returncode != 0:
        raise NamespaceUnavailable(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


@dataclass
class Namespace:
    name: str
    host_if: str
    ns_if: str
    subnet: str
    host_ip: str
    ns_ip: str

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """The remote machine's link goes down: packets to it are dropped, nothing is refused."""
        _ip("-n", self.name, "link", "set", self.ns_if, "down")

    def restore(self) -> None:
        _ip("-n", self.name, "link", "set", self.ns_if, "up")

    def pids(self) -> list[int]:
        result = _ip("netns", "pids", self.name, check=False)
        return [int(p) for p in result.stdout.split()] if result.returncode == 0 else []

    def destroy(self) -> None:
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.host_if, check=False)
        _ip("route", "del", "blackhole", self.subnet, "metric", BLACKHOLE_METRIC, check=False)


def _taken_networks() -> list[ipaddress.IPv4Network]:
    taken = []
    for entry in json.loads(_ip("-j", "route", "show", "table", "all").stdout or "[]"):
        dst = entry.get("dst", "")
        if dst and dst != "default" and ":" not in dst:
            taken.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    for link in json.loads(_ip("-j", "addr").stdout or "[]"):
        for addr in link.get("addr_info", []):
            if addr.get("family") == "inet":
                taken.append(ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False))
    return taken


def _free_subnet() -> ipaddress.IPv4Network:
    taken = _taken_networks()
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(200, 249)}.{random.randint(0, 255)}."
                                   f"{random.randrange(0, 256, 4)}/30")
        if not any(net.overlaps(t) for t in taken):
            return net  # type: ignore[return-value]
    raise NamespaceUnavailable("no free 10.x.y.z/30 for a test namespace")


def create_namespace(index: int = 0) -> Namespace:
    if os.geteuid() != 0:
        raise NamespaceUnavailable("creating network namespaces needs root (run the tests as root)")
    if shutil.which("ip") is None:
        raise NamespaceUnavailable("the `ip` command (iproute2) is not installed")
    tag = f"{os.getpid() % 100000}{index}{random.randint(0, 9)}"
    subnet = _free_subnet()
    host_ip, ns_ip = (str(h) for h in subnet.hosts())
    ns = Namespace(name=f"mbl{tag}", host_if=f"mbh{tag}", ns_if=f"mba{tag}", subnet=str(subnet),
                   host_ip=host_ip, ns_ip=ns_ip)
    try:
        _ip("route", "add", "blackhole", ns.subnet, "metric", BLACKHOLE_METRIC)
        _ip("netns", "add", ns.name)
        _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
        _ip("link", "set", ns.ns_if, "netns", ns.name)
        _ip("addr", "add", f"{host_ip}/30", "dev", ns.host_if)
        _ip("link", "set", ns.host_if, "up")
        _ip("-n", ns.name, "addr", "add", f"{ns_ip}/30", "dev", ns.ns_if)
        _ip("-n", ns.name, "link", "set", ns.ns_if, "up")
        _ip("-n", ns.name, "link", "set", "lo", "up")
    except (NamespaceUnavailable, OSError, subprocess.SubprocessError) as exc:
        ns.destroy()
        raise NamespaceUnavailable(str(exc)) from exc
    return ns
