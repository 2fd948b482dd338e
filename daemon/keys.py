"""API keys for ``/v1``: shown once at creation, stored as SHA-256 hashes, checked in constant time.

Each key also keeps its lifetime request and token counts (saved in the same batches as its last
use), so its total outlives the 30 days the access log keeps; the last 24 hours come from the log.

A key may have limits (``ApiKeyLimits``: requests per minute, tokens per UTC day), kept with it;
``admit`` enforces them for the router (the policy is ``daemon.router.limits``). The day's tokens
are counted here, from the same token counts as the totals, and saved with them; the minute's
requests live in memory only.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from core.json_store import JsonStore, UnreadableStore
from daemon.api.backup import BackupKey
from daemon.api.models import ApiKeyCreated, ApiKeyInfo, ApiKeyLimits
from daemon.router import limits as key_limits

_LOGGER = logging.getLogger(__name__)

KEY_PREFIX = "sk-mirbad-"


class _StoredKey(BaseModel):
    id: str
    name: str
    prefix: str
    sha256: str
    created_at: float
    last_used_at: float | None = None
    requests_total: int = 0
    tokens_total: int = 0
    limits: ApiKeyLimits = Field(default_factory=ApiKeyLimits)
    day: str | None = None  # the UTC day ``tokens_day`` counts (daemon.router.limits.utc_day)
    tokens_day: int = 0


_NO_LIMITS = ApiKeyLimits()


class _KeysFile(BaseModel):
    version: int = 1
    keys: list[_StoredKey] = []


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class KeyStore:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._store = JsonStore(path, _KeysFile)
        self._keys: dict[str, _StoredKey] = {}
        self._dirty_use = False
        self.clock = clock  # tests set a clock of their own to move through minutes and days
        self._windows = key_limits.RequestWindows()

    def load(self) -> None:
        try:
            data = self._store.read()
        except UnreadableStore as exc:
            raise SystemExit(f"cannot read API keys from {self._path}: {exc}") from exc.cause
        if data is None:
            return
        self._keys = {k.id: k for k in data.keys}

    def _save(self) -> None:
        self._store.write(_KeysFile(keys=list(self._keys.values())), json_mode=False)

    def create(self, name: str, limits: ApiKeyLimits | None = None) -> ApiKeyCreated:
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        stored = _StoredKey(id=uuid.uuid4().hex[:12], name=name, prefix=secret[: len(KEY_PREFIX) + 4],
                            sha256=_digest(secret).hex(), created_at=self.clock(),
                            limits=limits or ApiKeyLimits())
        self._keys[stored.id] = stored
        self._save()
        _LOGGER.info("API key %s (%s) created", stored.id, name)
        return ApiKeyCreated(info=self._info(stored), key=secret)

    def revoke(self, key_id: str) -> bool:
        if self._keys.pop(key_id, None) is None:
            return False
        self._windows.forget(key_id)
        self._save()
        _LOGGER.info("API key %s revoked", key_id)
        return True

    def set_limits(self, key_id: str, update: ApiKeyLimits) -> ApiKeyInfo | None:
        """Change the limits ``update`` names (its fields set, null clearing); None: no such key."""
        stored = self._keys.get(key_id)
        if stored is None:
            return None
        stored.limits = stored.limits.model_copy(update=update.model_dump(include=update.model_fields_set))
        self._save()
        _LOGGER.info("API key %s limits: %s", key_id, stored.limits.model_dump())
        return self._info(stored)

    def admit(self, key_id: str | None) -> None:
        """Let one /v1 request of ``key_id`` through, or raise its 429 (``daemon.router.limits``)."""
        stored = self._keys.get(key_id) if key_id is not None else None
        if stored is None or stored.limits == _NO_LIMITS:
            return
        now = self.clock()
        key_limits.check(stored.id, stored.limits, self._windows, self._tokens_today(stored, now), now)

    @staticmethod
    def _tokens_today(stored: _StoredKey, now: float) -> int:
        return stored.tokens_day if stored.day == key_limits.utc_day(now) else 0

    def list(self, last_24h: dict[str, tuple[int, int]] | None = None) -> list[ApiKeyInfo]:
        """Every key, oldest first; ``last_24h`` maps a key id to its (requests, tokens) of the last day."""
        recent = last_24h or {}
        return [self._info(k, *recent.get(k.id, (0, 0)))
                for k in sorted(self._keys.values(), key=lambda k: k.created_at)]

    def count_use(self, key_id: str, tokens: int) -> None:
        """One finished /v1 request made with ``key_id`` (saved with the next ``flush_usage``)."""
        stored = self._keys.get(key_id)
        if stored is not None:  # revoked while the request ran: nothing left to count on
            stored.requests_total += 1
            stored.tokens_total += tokens
            today = key_limits.utc_day(self.clock())
            if stored.day != today:
                stored.day, stored.tokens_day = today, 0
            stored.tokens_day += tokens
            self._dirty_use = True

    def verify(self, secret: str | None) -> str | None:
        """The id of the key matching ``secret``; every stored hash is compared, in constant time."""
        if not secret:
            return None
        digest = _digest(secret)
        found = None
        for stored in self._keys.values():
            if hmac.compare_digest(digest, bytes.fromhex(stored.sha256)):
                found = stored
        if found is not None:
            found.last_used_at = self.clock()
            self._dirty_use = True
            return found.id
        return None

    # --- backup and restore (daemon.backup) -------------------------------------------------------
    def export_records(self) -> builtins.list[BackupKey]:
        """Every key as a backup holds it: id, name, hash and limits (usage counts stay behind)."""
        return [BackupKey(id=k.id, name=k.name, prefix=k.prefix, sha256=k.sha256, created_at=k.created_at,
                          limits=k.limits.model_dump(exclude_none=True))
                for k in sorted(self._keys.values(), key=lambda k: k.created_at)]

    def match(self, record: BackupKey) -> BackupKey | None:
        """This store's record of the same key: by id, else by hash (the same secret under another id)."""
        mine = {k.id: k for k in self.export_records()}
        return mine.get(record.id) or next((k for k in mine.values() if k.sha256 == record.sha256), None)

    def import_records(self, records: builtins.list[BackupKey]) -> int:
        """Merge restored keys by id and hash: a known id takes the backup's name, hash and limits; a
        hash already held under another id is kept as it is; others are added. Saved once."""
        changed = 0
        for record in records:
            stored = self._keys.get(record.id)
            if stored is None and any(k.sha256 == record.sha256 for k in self._keys.values()):
                continue
            limits = ApiKeyLimits.model_validate(record.limits)
            if stored is None:
                self._keys[record.id] = _StoredKey(id=record.id, name=record.name, prefix=record.prefix,
                                                   sha256=record.sha256, created_at=record.created_at, limits=limits)
            elif (stored.name, stored.prefix, stored.sha256, stored.limits) != \
                    (record.name, record.prefix, record.sha256, limits):
                stored.name, stored.prefix, stored.sha256, stored.limits = \
                    record.name, record.prefix, record.sha256, limits
            else:
                continue
            changed += 1
        if changed:
            self._save()
            _LOGGER.info("restored %d API key record(s) from a backup", changed)
        return changed

    def flush_usage(self) -> None:
        """Persist last-used times (batched: not on every request)."""
        if self._dirty_use:
            self._dirty_use = False
            self._save()

    def _info(self, stored: _StoredKey, requests_24h: int = 0, tokens_24h: int = 0) -> ApiKeyInfo:
        now = self.clock()
        return ApiKeyInfo(id=stored.id, name=stored.name, prefix=stored.prefix,
                          created_at=stored.created_at, last_used_at=stored.last_used_at,
                          requests_24h=requests_24h, tokens_24h=tokens_24h,
                          requests_total=stored.requests_total, tokens_total=stored.tokens_total,
                          limits=stored.limits, tokens_today=self._tokens_today(stored, now),
                          requests_last_minute=self._windows.count(stored.id, now))
