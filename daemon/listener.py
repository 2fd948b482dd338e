"""Where the daemon listens: the one owner of its address, its ``daemon.json`` and a rebind.

``Listener`` starts the TCP site for the aiohttp runner, learns the port the OS gave when the config
asked for port 0 (tests), writes ``daemon.json`` (the admin and API URLs and the pid, read by
``mirbadllm ctl`` and the app), and moves to the new address when the LAN setting changes. With
/v1 open to the network it listens on every interface, and names the URLs other devices can use
(``lan_hosts``: this machine's LAN addresses), never ``0.0.0.0``. The Ollama API (``daemon.ollama``)
listens on a port of its own on the same host, and moves with it; a port already taken (Ollama
itself runs there) leaves it off, with one log line saying so.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import time

import psutil
from aiohttp import web

from core.json_store import write_json_atomic
from daemon.admin_lane import LaneSite, StatusLane
from daemon.api.models import DaemonInfo, DaemonSettings
from daemon.api.program import program_version
from daemon.config import DaemonConfig, save_settings
from daemon.paths import DaemonPaths

_LOGGER = logging.getLogger(__name__)

VERSION = program_version()


WILDCARDS = ("0.0.0.0", "::", "")
# Interfaces no other device reaches this machine through: containers' and VMs' bridges and their pairs.
VIRTUAL_INTERFACES = ("lo", "docker", "br-", "veth", "virbr", "vmnet", "vboxnet", "tailscale", "utun", "cni", "flannel")


def lan_hosts() -> list[str]:
    """This machine's IPv4 addresses other devices on its networks can use: interfaces that are up,
    not loopback, link-local or a container's bridge; private addresses (192.168/16, 10/8,
    172.16/12) first."""
    try:
        stats, addresses = psutil.net_if_stats(), psutil.net_if_addrs()
    except OSError:
        return []
    found: list[ipaddress.IPv4Address] = []
    for name, entries in addresses.items():
        if not stats.get(name) or not stats[name].isup or name.lower().startswith(VIRTUAL_INTERFACES):
            continue
        for entry in entries:
            if entry.family != socket.AF_INET:
                continue
            address = ipaddress.IPv4Address(entry.address)
            if not (address.is_loopback or address.is_link_local or address.is_unspecified) and address not in found:
                found.append(address)
    return [str(a) for a in sorted(found, key=lambda a: (not a.is_private, a))]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Listener:
    def __init__(self, config: DaemonConfig, paths: DaemonPaths) -> None:
        self._config = config
        self._paths = paths
        self.started_at = time.time()
        self._runner: web.AppRunner | None = None
        self._lane: StatusLane | None = None
        self._site: web.TCPSite | LaneSite | None = None
        self._ollama_runner: web.AppRunner | None = None
        self._ollama_site: web.TCPSite | None = None

    def _public_host(self) -> str:
        """The host this machine's own clients reach the daemon at (``daemon.json``)."""
        bind = self._config.bind_host
        return "127.0.0.1" if self._config.loopback_only or bind in WILDCARDS else bind

    @property
    def local_url(self) -> str:
        """Where this machine reaches /v1 and /api: ``http://127.0.0.1:8484`` (the Ollama API's
        calls go through /v1 here)."""
        return f"http://{_url_host(self._public_host())}:{self._config.port}"

    @property
    def ollama_port(self) -> int | None:
        """The port the Ollama API listens on now; None while it is off."""
        return self._config.ollama_port if self._ollama_site is not None else None

    def info(self) -> DaemonInfo:
        port, bind = self._config.port, self._config.bind_host
        hosts = lan_hosts() if bind in WILDCARDS else [] if self._config.loopback_only else [bind]
        lan = [f"http://{_url_host(h)}:{port}/v1" for h in hosts]
        return DaemonInfo(version=VERSION, host=bind, port=port,
                          api_url=lan[0] if lan else f"http://{self._public_host()}:{port}/v1", lan_urls=lan,
                          keys_required=self._config.keys_required, started_at=self.started_at,
                          home=str(self._paths.home))

    async def start(self, runner: web.AppRunner, lane: StatusLane | None = None) -> None:
        """Listen for ``runner``; with ``lane``, from its thread (``daemon.admin_lane``: the status
        call answers there while /v1 saturates the loop)."""
        self._runner, self._lane = runner, lane
        self._site = self._new_site(runner)
        await self._site.start()
        self._config.port = self._site.port  # tests ask for port 0: the one the OS gave
        self.write_info()

    def _new_site(self, runner: web.AppRunner) -> web.TCPSite | LaneSite:
        host, port = self._config.bind_host, self._config.port
        return web.TCPSite(runner, host, port) if self._lane is None else LaneSite(runner, host, port, self._lane)

    async def start_ollama(self, runner: web.AppRunner) -> bool:
        """Listen for the Ollama API on ``ollama_port`` at /v1's host; False (and one log line saying
        why) when it is off or the port is taken."""
        self._ollama_runner = runner
        return await self._listen_ollama()

    async def _listen_ollama(self) -> bool:
        port, host = self._config.ollama_port, self._config.bind_host
        if self._ollama_runner is None or not port:
            _LOGGER.info("Ollama API off: ollama_port is 0 or unset in config.toml")
            return False
        site = web.TCPSite(self._ollama_runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            _LOGGER.warning("Ollama API off: cannot listen on %s:%d (%s); Ollama itself may run there. "
                            "Set ollama_port in config.toml to a free port, or 0 to keep it off.",
                            host, port, exc.strerror or exc)
            return False
        self._ollama_site = site
        _LOGGER.info("Ollama API listening on %s:%d", host, port)
        return True

    async def stop_ollama(self) -> None:
        """Stop the Ollama API's port and its app (its requests in flight end first)."""
        runner, self._ollama_runner, self._ollama_site = self._ollama_runner, None, None
        if runner is not None:
            await runner.cleanup()

    async def apply(self, settings: DaemonSettings) -> None:
        """Save the run-time settings; listen on the new address when LAN access changed it."""
        before = self._config.bind_host
        sent = settings.model_fields_set  # a field the client did not send stays as it is
        if "lan_access" in sent:
            self._config.lan_access = settings.lan_access
        if "require_api_keys" in sent:
            self._config.require_api_keys = settings.require_api_keys
        if "backup" in settings.model_fields_set:  # the scheduler reads it before each run
            self._config.backup = settings.backup
        if "audit_retention_days" in settings.model_fields_set:  # likewise: unsent, it stays
            self._config.audit_retention_days = settings.audit_retention_days
        if "tracing" in settings.model_fields_set:  # a client that does not know it leaves it as it is
            self._config.tracing = settings.tracing  # saved; the router's tracing is built at start
        save_settings(self._paths.config, self._config.settings())
        if self._runner is not None and self._site is not None and before != self._config.bind_host:
            await self._site.stop()
            self._site = self._new_site(self._runner)
            await self._site.start()
            self.write_info()
            _LOGGER.info("now listening on %s:%s", self._config.bind_host, self._config.port)
            if self._ollama_site is not None:  # the Ollama API follows /v1 onto (or off) the LAN
                await self._ollama_site.stop()
                self._ollama_site = None
                await self._listen_ollama()

    def write_info(self) -> None:
        host, port = self._public_host(), self._config.port
        write_json_atomic(self._paths.daemon_info, {
            "admin_url": f"http://{host}:{port}", "api_url": f"http://{host}:{port}/v1", "pid": os.getpid()})
