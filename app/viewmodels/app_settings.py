"""The Settings page: theme, start at login, daemon address, update feed. Saved in the app's preferences file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from app import autostart
from app.preferences import AppPreferences, load_preferences, save_preferences
from app.viewmodels.observable import Observable
from app.viewmodels.updates import UpdatesViewModel


@dataclass(frozen=True)
class AppSettingsState:
    prefs: AppPreferences
    autostart: bool
    autostart_error: str | None = None
    restart_needed: bool = False  # the daemon address changes at the next launch


class AppSettingsViewModel:
    def __init__(self, home: Path, prefs_path: Path | None = None, platform: str | None = None,
                 updates: UpdatesViewModel | None = None) -> None:
        self.home = home
        self._path = prefs_path
        self._platform = platform
        prefs = load_preferences(prefs_path)
        self.state: Observable[AppSettingsState] = Observable(AppSettingsState(prefs, self._autostart_enabled()))
        self.updates = updates or UpdatesViewModel(prefs.update_feed_url, home / "updates")

    def _autostart_enabled(self) -> bool:
        try:
            return autostart.is_enabled(**({"platform": self._platform} if self._platform else {}))
        except OSError:
            return False

    def _save(self, prefs: AppPreferences, **changes: object) -> None:
        save_preferences(prefs, self._path)
        s = self.state.value
        self.state.set(AppSettingsState(prefs, **{"autostart": s.autostart, "autostart_error": s.autostart_error,
                                                  "restart_needed": s.restart_needed, **changes}))  # type: ignore[arg-type]

    def set_theme(self, theme: str) -> None:
        self._save(self.state.value.prefs.model_copy(update={"theme": theme}))

    def dismiss_keys_warning(self, warning: str) -> None:
        """Hide this keys-at-rest warning on the Overview (the Nodes page keeps saying it)."""
        self._save(self.state.value.prefs.model_copy(update={"dismissed_keys_warning": warning}))

    def set_notifications(self, enabled: bool) -> None:
        self._save(self.state.value.prefs.model_copy(update={"notifications": enabled}))

    def set_check_updates_daily(self, enabled: bool) -> None:
        """On: the feed is checked a minute after the app starts, then daily (from the next start)."""
        self._save(self.state.value.prefs.model_copy(update={"check_updates_daily": enabled}))

    def set_daemon_url(self, url: str) -> str | None:
        """Save the daemon's admin URL ('' for the local one); returns an error text or None."""
        url = url.strip().rstrip("/")
        if url:
            parsed = urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                return "Use an address like http://127.0.0.1:8484"
        if url == self.state.value.prefs.daemon_url:
            return None
        self._save(self.state.value.prefs.model_copy(update={"daemon_url": url}), restart_needed=True)
        return None

    def set_update_feed_url(self, url: str) -> str | None:
        """Save the release feed's URL ('' turns updates off); returns an error text or None."""
        url = url.strip()
        if url:
            parsed = urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                return "Use the feed's address, like https://example.org/mirbadllm/stable/feed.json"
        if url != self.state.value.prefs.update_feed_url:
            self._save(self.state.value.prefs.model_copy(update={"update_feed_url": url}))
        self.updates.set_feed_url(url)
        return None

    def set_autostart(self, enabled: bool) -> None:
        try:
            kwargs = {"platform": self._platform} if self._platform else {}
            autostart.set_enabled(enabled, autostart.launch_command(self.home), **kwargs)  # type: ignore[arg-type]
        except OSError as exc:
            s = self.state.value
            self.state.set(AppSettingsState(s.prefs, s.autostart, f"Could not change start at login: {exc}",
                                            s.restart_needed))
            return
        s = self.state.value
        self.state.set(AppSettingsState(s.prefs, enabled, None, s.restart_needed))
