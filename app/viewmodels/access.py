"""The Access page: API keys (create, list, revoke), LAN access, and connection snippets.

A created key's secret is handed to the caller once and never kept here: the list holds only
``ApiKeyInfo``, which has no secret. Opening ``/v1`` to the LAN always turns on required keys,
because the daemon refuses an open LAN endpoint without them. Each key shows its use (requests
and tokens, last 24 hours and in total), read again whenever the page asks for a refresh, and its
limits (requests per minute, tokens per UTC day) with its use against them; ``set_limits`` changes them.

"Connect your apps": ``connection`` is a tool's configuration (``daemon.api.connect``, the text
``mirbadllm ctl connect`` prints) for the URL of this machine or, open to the LAN, of another device,
the served model picked, and a key: a secret only when the page was just handed one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.connect import (
    Snippet,
    config_for,
    connect_url,
    key_note,
    key_text,
    served_models,
)
from daemon.api.models import (
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyLimits,
    DaemonSettings,
    Event,
)
from daemon.api.protocol import DaemonApi

LAN_NEEDS_KEYS = ("Opening /v1 to your network turns on required API keys: every client, "
                  "including ones on this machine, must then send a key.")


def count(n: int) -> str:
    """A count the way a person reads it at a glance: 950, 12.3k, 4.5M."""
    for limit, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= limit:
            return f"{n / limit:.1f}".rstrip("0").rstrip(".") + suffix
    return str(n)


def usage_cells(info: ApiKeyInfo) -> tuple[str, str]:
    """The key's requests and tokens, each as "last 24 h / total"."""
    return (f"{count(info.requests_24h)} / {count(info.requests_total)}",
            f"{count(info.tokens_24h)} / {count(info.tokens_total)}")


def limits_cell(info: ApiKeyInfo) -> str:
    """The key's limits with its use against them: "2 / 60 a min · 3.4k / 100k today"."""
    rpm, day = info.limits.requests_per_minute, info.limits.tokens_per_day
    parts = [f"{count(info.requests_last_minute)} / {count(rpm)} a min" if rpm else "",
             f"{count(info.tokens_today)} / {count(day)} today" if day else ""]
    return " · ".join(p for p in parts if p) or "No limits"


@dataclass(frozen=True)
class AccessState:
    keys: tuple[ApiKeyInfo, ...] = ()
    settings: DaemonSettings | None = None
    api_url: str = ""
    lan_urls: tuple[str, ...] = ()  # every /v1 URL other devices can use, while open to the LAN
    local_url: str = ""  # the /v1 URL a tool on this machine uses (loopback when the daemon listens on all)
    models: tuple[str, ...] = ()  # served names, the ones a request reaches soonest first
    error: str | None = None

    @property
    def model(self) -> str:
        """The model a configuration names unless another is picked."""
        return self.models[0] if self.models else ""

    @property
    def keys_required(self) -> bool:
        return bool(self.settings and (self.settings.require_api_keys or self.settings.lan_access))

    def connection(self, tool: str, model: str = "", *, from_lan: bool = False,
                   secret: str | None = None) -> tuple[Snippet, str]:
        """``tool``'s configuration and what to know about its key. ``from_lan`` takes the first LAN
        URL (this machine's URL while /v1 is not open to the LAN); ``secret`` fills the key in."""
        url = self.lan_urls[0] if from_lan and self.lan_urls else self.local_url or self.api_url
        key = key_text(secret, self.keys_required or bool(from_lan and self.lan_urls))
        return config_for(tool, url, key, model or self.model), key_note(key)


class AccessViewModel:
    def __init__(self, fleet: FleetViewModel) -> None:
        self.fleet = fleet
        self.client: DaemonApi = fleet.client
        self.state: Observable[AccessState] = Observable(AccessState())
        self._loaded = False
        fleet.snapshot.subscribe(self._on_fleet, now=True)
        fleet.events.subscribe(self._on_event)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        if snapshot.connected and snapshot.loaded and not self._loaded:
            self._loaded = True  # first contact, or back after the daemon was away: read keys again
            asyncio.ensure_future(self.refresh())
        elif not snapshot.connected:
            self._loaded = False
        models = tuple(served_models(snapshot.models))
        s = self.state.value
        lan = tuple(snapshot.daemon.lan_urls) if snapshot.daemon else ()
        local = connect_url(snapshot.daemon, from_lan=False) if snapshot.daemon else snapshot.api_url
        if (s.api_url, s.models, s.lan_urls, s.local_url) != (snapshot.api_url, models, lan, local):
            self.state.set(replace(s, api_url=snapshot.api_url, lan_urls=lan, local_url=local, models=models))

    def _on_event(self, event: Event) -> None:
        if event.type in ("keys.changed", "settings.changed"):
            asyncio.ensure_future(self.refresh())

    async def refresh(self) -> None:
        try:
            keys = await self.client.list_keys()
            settings = await self.client.get_settings()
        except DaemonError as exc:
            self.state.set(replace(self.state.value, error=exc.message))
            return
        self.state.set(replace(self.state.value, keys=tuple(keys), settings=settings, error=None))

    async def create_key(self, name: str) -> ApiKeyCreated:
        created = await self.client.create_key(name.strip())
        s = self.state.value
        if all(k.id != created.info.id for k in s.keys):
            self.state.set(replace(s, keys=s.keys + (created.info,)))
        return created

    async def set_limits(self, key_id: str, requests_per_minute: int | None,
                         tokens_per_day: int | None) -> ApiKeyInfo:
        """Set both limits of a key (None: no limit)."""
        info = await self.client.set_key_limits(
            key_id, ApiKeyLimits(requests_per_minute=requests_per_minute, tokens_per_day=tokens_per_day))
        s = self.state.value
        self.state.set(replace(s, keys=tuple(info if k.id == key_id else k for k in s.keys)))
        return info

    async def revoke_key(self, key_id: str) -> None:
        await self.client.revoke_key(key_id)
        s = self.state.value
        self.state.set(replace(s, keys=tuple(k for k in s.keys if k.id != key_id)))

    async def set_lan_access(self, enabled: bool) -> DaemonSettings:
        current = self.state.value.settings or DaemonSettings()
        wanted = current.model_copy(update={"lan_access": enabled,
                                            "require_api_keys": current.require_api_keys or enabled})
        return await self._put(wanted)

    async def set_require_keys(self, required: bool) -> DaemonSettings:
        current = self.state.value.settings or DaemonSettings()
        if not required and current.lan_access:
            raise ValueError("Keys stay required while /v1 is open to the LAN; turn LAN access off first.")
        return await self._put(current.model_copy(update={"require_api_keys": required}))

    async def _put(self, settings: DaemonSettings) -> DaemonSettings:
        saved = await self.client.put_settings(settings)
        self.state.set(replace(self.state.value, settings=saved, error=None))
        return saved
