"""The daemon's configuration: one pydantic model, read from ``config.toml`` and the command line.

Settings the app changes at run time (``DaemonSettings``) are written back to ``config.toml`` with
tomlkit, so the user's comments, layout, tables and lists survive; only those keys change.
"""

from __future__ import annotations

import functools
import ipaddress
import tomllib
from pathlib import Path

import tomlkit
from pydantic import BaseModel, Field

from core.json_store import write_atomic
from daemon.api.backup import BackupSettings
from daemon.api.models import DEFAULT_PORT, DaemonSettings, TracingSettings
from daemon.models.health import HealthPolicy
from daemon.nodes.links import RETRY_MAX_S
from daemon.nodes.monitor import NodePolicy
from daemon.upgrades.rollout import UpgradePolicy

MAX_BODY_BYTES = 64 * 1024 * 1024
OLLAMA_PORT = 11434  # Ollama's own: tools that speak only its API look there


class DaemonConfig(BaseModel):
    host: str = Field(default="127.0.0.1", description="Address /v1 and /api listen on.")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="Port of /v1 and /api.")
    lan_access: bool = Field(default=False, description="Listen on every interface (requires API keys).")
    ollama_port: int | None = Field(default=OLLAMA_PORT, ge=0, le=65535,
                                    description="Port of the Ollama API (daemon.ollama), on /v1's host and behind its "
                                                "keys; 0 or none: off. Taken at start (Ollama itself runs): off, "
                                                "with a log line saying so.")
    require_api_keys: bool = Field(default=False, description="Require an API key on /v1 even on loopback.")
    local_agent: bool = Field(default=True, description="Run this machine's agent as a supervised child.")
    local_agent_retry_max_s: float = Field(default=RETRY_MAX_S, gt=0, le=60,
                                           description="Longest wait between attempts to reach the local agent "
                                                       "(doubling from 0.2 s); the spawned agent listens after "
                                                       "about a second.")
    llama_server: str | None = Field(default=None, description="llama-server binary for the local agent.")
    max_body_bytes: int = Field(default=MAX_BODY_BYTES, description="Largest /v1 request body.")
    event_ring: int = Field(default=2000, ge=10, description="Events kept for the long-poll feed.")
    history_interval_s: float = Field(default=2.0, gt=0, description="Telemetry pull interval.")
    telemetry_interval_s: float = Field(default=2.0, gt=0, description="Agent telemetry sampling interval.")
    runtime_first_port: int | None = Field(default=None, ge=1024, le=65000,
                                           description="Lowest loopback port for the local agent's runtimes "
                                                       "(default: the agent's, 18080).")
    audit_retention_days: int = Field(default=90, ge=1, le=3650, description="Days an audit-log entry is kept.")
    seed_demo_model: bool = Field(default=True, description="Register the demo model on first run.")
    release_feed_url: str = Field(default="", max_length=2048, description="The signed release feed (feed.json "
                                  "beside feed.json.sig) GPU runtime packs come from: CUDA for a node with an "
                                  "NVIDIA GPU (daemon.runtimes.packs); empty: none is fetched.")
    health: HealthPolicy = Field(default_factory=HealthPolicy, description="Crash restarts and probes.")
    nodes: NodePolicy = Field(default_factory=NodePolicy, description="LAN discovery and the node monitor.")
    upgrades: UpgradePolicy = Field(default_factory=UpgradePolicy, description="Agent rollouts, one node at a time.")
    backup: BackupSettings = Field(default_factory=BackupSettings, description="Daily backups (daemon.backup).")
    tracing: TracingSettings = Field(default_factory=TracingSettings,
                                     description="OpenTelemetry tracing of /v1 ([tracing] in config.toml; read at start).")

    @property
    def bind_host(self) -> str:
        return "0.0.0.0" if self.lan_access and is_loopback(self.host) else self.host

    @property
    def loopback_only(self) -> bool:
        return is_loopback(self.bind_host)

    @property
    def keys_required(self) -> bool:
        """Keys are required when asked for, and always when /v1 is reachable beyond loopback."""
        return self.require_api_keys or not self.loopback_only

    def settings(self) -> DaemonSettings:
        return DaemonSettings(lan_access=self.lan_access, require_api_keys=self.require_api_keys,
                              tracing=self.tracing, audit_retention_days=self.audit_retention_days,
                              backup=self.backup)


@functools.lru_cache(maxsize=64)  # asked several times per /v1 request (Host check, key check)
def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_config(path: Path, **overrides: object) -> DaemonConfig:
    """``config.toml`` values, then command-line overrides that are not None."""
    values: dict[str, object] = {}
    if path.exists():
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SystemExit(f"cannot read {path}: {exc}; fix or remove it") from exc
    values.update({k: v for k, v in overrides.items() if v is not None})
    return DaemonConfig.model_validate(values)


def save_settings(path: Path, settings: DaemonSettings) -> None:
    """Write the run-time settings into ``config.toml``, keeping everything else in it as it was."""
    document = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    for key, value in settings.model_dump().items():
        table = document.get(key)
        if isinstance(value, dict) and isinstance(table, dict):  # a [table] the user has: its comments stay
            for name, item in value.items():
                table[name] = item
        else:
            document[key] = value
    write_atomic(path, tomlkit.dumps(document).encode("utf-8"))
