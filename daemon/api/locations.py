"""Where a daemon lives, for its clients: the home directory, the admin token, the URL.

The daemon itself lays out its home in ``daemon.paths``; clients (app, CLI, tests) only need
what is here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

HOME_ENV = "MIRBADLLM_HOME"
ADMIN_TOKEN_FILE = "admin-token"
DAEMON_INFO_FILE = "daemon.json"
# What a daemon started in the background (by the app, by `make run`) prints, under its home.
LAUNCH_LOG = Path("logs") / "daemon-launch.log"
KEYRING_SERVICE = "mirbadllm"
KEYRING_USER = "admin-token"


def default_home() -> Path:
    """``MIRBADLLM_HOME``, else the platform's user data directory."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("mirbadllm", appauthor=False))


def read_admin_token(home: Path) -> str | None:
    """The admin token from ``{home}/admin-token``, else from the OS keychain; None if neither."""
    path = home / ADMIN_TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token
    except OSError:
        pass
    # The keychain as core.key_store sees it: honours MIRBADLLM_KEYRING (off in the tests).
    from core.key_store import keychain

    backend, _why = keychain()
    if backend is None:
        return None
    try:
        return backend.get_password(KEYRING_SERVICE, f"{KEYRING_USER}:{home}")
    except Exception as exc:  # noqa: BLE001 - a missing or locked keychain is normal
        _LOGGER.debug("no keychain: %s", exc)
        return None


def read_daemon_url(home: Path, default_port: int = 8484) -> str:
    """The admin URL the running daemon wrote to ``{home}/daemon.json``, else the default."""
    import json

    try:
        info = json.loads((home / DAEMON_INFO_FILE).read_text(encoding="utf-8"))
        return str(info["admin_url"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"http://127.0.0.1:{default_port}"
