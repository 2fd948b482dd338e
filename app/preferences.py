"""The app's own preferences (theme, daemon address, …), one JSON file in the user config dir.

These belong to the desktop app, not the daemon: the daemon's settings go through the admin API.
Writes are atomic (``core.json_store.write_atomic``). ``MIRBADLLM_APP_CONFIG`` points tests elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from core.json_store import write_atomic
from core.releases.feed import DEFAULT_FEED_URL

_LOGGER = logging.getLogger(__name__)

CONFIG_ENV = "MIRBADLLM_APP_CONFIG"

Theme = Literal["system", "light", "dark"]


class AppPreferences(BaseModel):
    theme: Theme = Field(default="system", description="light, dark, or follow the system.")
    daemon_url: str = Field(default="", description="Admin URL of the daemon; empty: the one in {home}/daemon.json.")
    notifications: bool = Field(default=True, description="Tell me when a model becomes ready or fails.")
    update_feed_url: str = Field(default=DEFAULT_FEED_URL, description="URL of the signed release feed "
                                 "(feed.json): the project's releases unless set; empty: updates are off.")
    check_updates_daily: bool = Field(default=True, description="Check the feed a minute after the app starts "
                                      "and then once a day; off: only when asked.")
    dismissed_keys_warning: str = Field(default="", description=(
        "The keys-at-rest warning the user dismissed; a different warning is shown again."))


def preferences_path() -> Path:
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir("mirbadllm", appauthor=False)) / "app.json"


def load_preferences(path: Path | None = None) -> AppPreferences:
    path = path or preferences_path()
    try:
        return AppPreferences.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return AppPreferences()
    except (OSError, ValueError, ValidationError) as exc:
        _LOGGER.warning("ignoring unreadable preferences %s: %s", path, exc)
        return AppPreferences()


def save_preferences(prefs: AppPreferences, path: Path | None = None) -> None:
    write_atomic(path or preferences_path(), prefs.model_dump_json(indent=2).encode("utf-8"), 0o600)
