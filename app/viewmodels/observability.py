"""The Settings page's daemon observability, Qt-free: tracing (``DaemonSettings.tracing``) and where
Prometheus scrapes the fleet.

Tracing is read from ``GET /api/settings`` once the fleet is connected (and again on a
``settings.changed`` event) and saved with ``put_settings``: the settings as read, with the new
``tracing``, so nothing else changes. The daemon builds its tracing at start, so a saved change
applies from its next start (``RESTART_NOTE``). The rules are the daemon's: an endpoint or a sample
ratio it refuses comes back as its 4xx message, shown as it is; only a ratio that is not a number
at all is stopped here (a text box cannot carry one to the daemon).

``prometheus_snippet`` is a ``prometheus.yml`` job for the daemon's ``/metrics`` (no token) and the
fleet's HTTP service discovery (``/api/prometheus/targets``, the admin token read from its file).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from core.tasks import unless_running
from daemon.api.client import DaemonError
from daemon.api.connect import Snippet
from daemon.api.locations import ADMIN_TOKEN_FILE
from daemon.api.models import Event, TracingSettings
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

RESTART_NOTE = ("The daemon reads these when it starts: a change is saved at once and traced requests follow "
                "from the daemon's next start.")
RATIO_NOT_A_NUMBER = "Sample ratio: write a number from 0 to 1, e.g. 0.25 (a quarter of new requests traced)."


@dataclass(frozen=True)
class TracingState:
    loaded: bool = False
    tracing: TracingSettings = field(default_factory=TracingSettings)  # as the daemon holds it
    saving: bool = False
    saved: bool = False           # saved in this session: the restart note is said as news
    error: str | None = None      # the daemon's refusal (or why it could not be read), as it said it


def daemon_base(snapshot: FleetSnapshot) -> str:
    """The daemon's own address (``/v1``'s without it): its ``/metrics`` and ``/api`` are there."""
    url = snapshot.api_url.rstrip("/")
    return url.removesuffix("/v1")


def token_file(snapshot: FleetSnapshot) -> str:
    """Where the daemon keeps its admin token, on its machine (the home it reports)."""
    home = snapshot.daemon.home if snapshot.daemon else ""
    return str(PurePath(home) / ADMIN_TOKEN_FILE) if home else f"<home>/{ADMIN_TOKEN_FILE}"


def prometheus_snippet(base: str, credentials_file: str) -> Snippet:
    """A scrape job: the daemon and each node (its node exporter), found through HTTP SD."""
    base = base.rstrip("/")
    return Snippet("prometheus.yml", "yaml",
                   "# The daemon's /metrics needs no token; the list of targets needs the admin token.\n"
                   "scrape_configs:\n"
                   "  - job_name: mirbadllm\n"
                   "    metrics_path: /metrics\n"
                   "    http_sd_configs:\n"
                   f"      - url: {base}/api/prometheus/targets\n"
                   "        authorization:\n"
                   "          type: Bearer\n"
                   f"          credentials_file: {credentials_file}\n")


class ObservabilityViewModel:
    def __init__(self, fleet: FleetViewModel) -> None:
        self.client: DaemonApi = fleet.client
        self.fleet = fleet
        self.state: Observable[TracingState] = Observable(TracingState())
        self._reading: asyncio.Future[None] | None = None
        fleet.snapshot.subscribe(self._on_fleet, now=True)
        fleet.events.subscribe(self._on_event)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        if snapshot.connected and snapshot.loaded and not self.state.value.loaded:
            self._read()

    def _on_event(self, event: Event) -> None:
        if event.type == "settings.changed" and not self.state.value.saving:
            self._read()

    def _read(self) -> None:
        self._reading = unless_running(self._reading, self.load)

    async def load(self) -> None:
        try:
            settings = await self.client.get_settings()
        except DaemonError as exc:
            self.state.set(replace(self.state.value, error=exc.message))
            return
        self.state.set(replace(self.state.value, loaded=True, tracing=settings.tracing))

    async def save(self, enabled: bool, endpoint: str, service_name: str, sample_ratio: str) -> TracingSettings | None:
        """Save tracing as written; the saved settings, or None with ``error`` set to why not."""
        try:
            ratio = float(sample_ratio.strip())
        except ValueError:
            self.state.set(replace(self.state.value, error=RATIO_NOT_A_NUMBER, saved=False))
            return None
        # Unchecked here: the daemon checks the endpoint, the name and the ratio, and says what is wrong.
        wanted = TracingSettings.model_construct(enabled=enabled, endpoint=endpoint.strip(),
                                                 service_name=service_name.strip(), sample_ratio=ratio)
        self.state.set(replace(self.state.value, saving=True, error=None, saved=False))
        try:
            current = await self.client.get_settings()
            saved = await self.client.put_settings(current.model_copy(update={"tracing": wanted}))
        except DaemonError as exc:
            self.state.set(replace(self.state.value, saving=False, error=exc.message))
            return None
        self.state.set(replace(self.state.value, loaded=True, tracing=saved.tracing, saving=False, saved=True))
        return saved.tracing
