"""The admin token that guards ``/api``: a file (0600) in the home, and the OS keychain if any."""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from pathlib import Path

from core.json_store import write_atomic
from core.key_store import keychain
from daemon.api.locations import KEYRING_SERVICE, KEYRING_USER

_LOGGER = logging.getLogger(__name__)


def load_or_create(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
        if token:
            path.chmod(0o600)
            return token
    except OSError:
        pass
    token = secrets.token_urlsafe(32)
    write_atomic(path, (token + "\n").encode("utf-8"), 0o600)
    _LOGGER.info("created the admin token at %s", path)
    return token


def _store_in_keychain(home: Path, token: str) -> None:
    backend, why = keychain()  # honours MIRBADLLM_KEYRING (off in the tests)
    if backend is None:
        _LOGGER.debug("admin token not stored in a keychain: %s", why)
        return
    try:
        backend.set_password(KEYRING_SERVICE, f"{KEYRING_USER}:{home}", token)
    except Exception as exc:  # noqa: BLE001 - no keychain (headless Linux) is normal
        _LOGGER.debug("admin token not stored in a keychain: %s", exc)


async def store_in_keychain(home: Path, token: str) -> None:
    """Best effort, off the event loop: some keyring backends block."""
    await asyncio.get_running_loop().run_in_executor(None, _store_in_keychain, home, token)


def matches(expected: str, header: str | None) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(expected.encode(), header[7:].strip().encode())
