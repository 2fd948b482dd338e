"""Where the daemon listens: the one owner of its address, its ``daemon.json`` and a rebind.

``Listener`` starts the TCP site for the aiohttp runner, learns the port the OS gave when the config
asked for port 0 (tests), writes ``daemon.json`` (the admin and API URLs and the pid, read by
``mirbadllm ctl`` and the app), and moves to the new address when the LAN setting changes.
"""

from __future__ import annotations

import logging
import os
import time

from aiohttp import web

from daemon.api.models import DaemonInfo, DaemonSettings
from daemon.api.program import program_version
from daemon.atomic import write_json_atomic
from daemon.config import DaemonConfig, save_settings
from daemon.paths import DaemonPaths

_LOGGER = logging.getLogger(__name__)

VERSION = program_version()


class Listener:
    def __init__(self, config: DaemonConfig, paths: DaemonPaths) -> None:
        self._config = config
        self._paths = paths
        self.started_at = time.time()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    def _public_host(self) -> str:
        return "127.0.0.1" if self._config.loopback_only else self._config.bind_host

    def info(self) -> DaemonInfo:
        host, port = self._public_host(), self._config.port
        return DaemonInfo(version=VERSION, host=self._config.bind_host, port=port, api_url=f"http://{host}:{port}/v1",
                          keys_required=self._config.keys_required, started_at=self.started_at,
                          home=str(self._paths.home))

    async def start(self, runner: web.AppRunner) -> None:
        self._runner = runner
        self._site = web.TCPSite(runner, self._config.bind_host, self._config.port)
        await self._site.start()
        if self._config.port == 0:  # tests: learn the port the OS gave us
            server = getattr(self._site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self._config.port = sockets[0].getsockname()[1]
        self.write_info()

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
            self._site = web.TCPSite(self._runner, self._config.bind_host, self._config.port)
            await self._site.start()
            self.write_info()
            _LOGGER.info("now listening on %s:%s", self._config.bind_host, self._config.port)

    def write_info(self) -> None:
        host, port = self._public_host(), self._config.port
        write_json_atomic(self._paths.daemon_info, {
            "admin_url": f"http://{host}:{port}", "api_url": f"http://{host}:{port}/v1", "pid": os.getpid()})
