"""``SqliteWorker``: one SQLite file whose connection only one dedicated thread uses; callers await it.

The history (``daemon.history``) and the audit log (``daemon.audit.log``) each are one: a slow write
never blocks the event loop, and no two threads share the connection. A subclass opens ``_db`` its
own way (schema, migrations, pragmas) on that thread, through ``_run``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


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
