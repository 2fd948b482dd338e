"""``BackupScheduler``: one backup a day into the backup directory, the oldest pruned past ``keep``.

A run is due a day after the newest backup in the directory; with none there, an hour after the
daemon starts (so a daemon started for a minute, a test's, writes nothing). A run that fails (the
directory is missing, the disk is full, the passphrase file is unreadable) is recorded as a
``backup.failed`` event and in the log, and tried again an hour later; it never ends the daemon.

Without ``passphrase_file`` a scheduled backup carries no secrets: models, key hashes, nodes and
settings, but not the CA or key files. With it, the file's first line is the passphrase and the
backup carries them encrypted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from daemon.api.backup import BackupFile
from daemon.backup.service import BackupService
from daemon.config import DaemonConfig
from daemon.errors import DaemonProblem
from daemon.events import EventBus

_LOGGER = logging.getLogger(__name__)

DAY_S = 86400.0
FIRST_DELAY_S = 3600.0
RETRY_S = 3600.0
CHECK_S = 3600.0  # a changed setting (on, off) is seen within this


class BackupScheduler:
    def __init__(self, service: BackupService, config: DaemonConfig, events: EventBus,
                 clock: Callable[[], float] = time.time) -> None:
        self._service = service
        self._config = config
        self._events = events
        self._clock = clock
        self._started = clock()
        self._failed_at: float | None = None

    def due_at(self) -> float:
        """When the next scheduled backup is due (wall clock)."""
        newest = max((f.created_at for f in self._service.files()), default=None)
        due = self._started + FIRST_DELAY_S if newest is None else newest + DAY_S
        if self._failed_at is not None:
            due = max(due, self._failed_at + RETRY_S)
        return due

    def _passphrase(self) -> str | None:
        path = self._config.backup.passphrase_file
        if not path:
            return None
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DaemonProblem(409, "backup_passphrase_unreadable", f"The backup passphrase file {path} is not "
                                f"readable ({type(exc).__name__}).") from None
        return lines[0] if lines and lines[0] else None

    async def run_once(self) -> BackupFile | None:
        """One scheduled backup and the prune after it; a failure is an event, never an exception."""
        try:
            saved = await self._service.save(self._passphrase(), scheduled=True)
            dropped = self._service.prune(self._config.backup.keep)
        except Exception as exc:  # noqa: BLE001 - a failed backup is reported, the daemon goes on
            reason = exc.message if isinstance(exc, DaemonProblem) else f"{type(exc).__name__}: {exc}"
            self._failed_at = self._clock()
            self._service.last_error = reason
            _LOGGER.error("scheduled backup failed: %s", reason)
            self._events.publish("backup.failed", None, reason=reason)
            return None
        self._failed_at, self._service.last_error = None, None
        if dropped:
            _LOGGER.info("pruned %d old backup(s): %s", len(dropped), ", ".join(dropped))
        return saved

    async def run(self) -> None:
        while True:
            wait = CHECK_S
            if self._config.backup.enabled:
                left = self.due_at() - self._clock()
                if left <= 0:
                    await self.run_once()
                    continue
                wait = min(left, CHECK_S)
            await asyncio.sleep(wait)
