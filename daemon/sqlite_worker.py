"""``SqliteWorker``: one SQLite file whose connection only one dedicated thread uses; callers await it.

The history (``daemon.history``) and the audit log (``daemon.audit.log``) each are one: a slow write
never blocks the event loop, and no two threads share the connection. A subclass opens ``_db`` its
own way (schema, migrations, pragmas) on that thread, through ``_run``; ``add_columns`` brings an
older file's table up to date.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_LOGGER = logging.getLogger(__name__)


def add_columns(db: sqlite3.Connection, table: str, columns: dict[str, str], who: str) -> None:
    """Add the ``columns`` (name -> type) an older ``table`` lacks; idempotent: a half-done run resumes."""
    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    for name, kind in columns.items():
        if name not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            _LOGGER.info("%s: added column %s.%s", who, table, name)


class SqliteWorker:
    def __init__(self, path: Path, thread_name: str) -> None:
        self._path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._db: sqlite3.Connection | None = None

    async def _run(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the connection's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def close(self) -> None:
        """Close the connection on its thread, then end the thread."""
        await self._run(self._close)
        self._pool.shutdown(wait=True)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
