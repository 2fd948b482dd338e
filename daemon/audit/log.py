"""``AuditLog``: the recorder every feature writes its admin actions through, and the reader of
``GET /api/audit``.

The entries live in the ``audit`` table of ``history.sqlite`` (the table ``daemon.history`` has
always had: ts, actor, action, subject, detail), which ``open`` migrates in place by adding the
snapshot columns and an index on ts; old rows stay and read with empty snapshots. The log has its
own connection and thread (SQLite in WAL mode takes writers from both in turn).

Recording, for a feature handed the log by ``daemon.deps``::

    await audit.record("backup.create", archive_name, after={"path": str(path), "bytes": size})
    await audit.record("model.update", model_id, before=old_definition, after=new_definition)

``actor`` defaults to whoever is acting now (``daemon.audit.actor``): the client of the admin-API
call being answered, else ``system``. ``before`` / ``after`` take pydantic models, dicts or lists;
secrets in them are redacted before anything is stored (``daemon.audit.redact``). Recording never
raises: a failed write is logged and the action it describes goes on.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from daemon.api.audit import ACTOR_ADMIN_TOKEN, DEFAULT_LIMIT, AuditEntry, AuditPage
from daemon.audit.actor import current_actor
from daemon.audit.redact import scrub, to_json
from daemon.errors import CURRENT_REQUEST_ID
from daemon.sqlite_worker import SqliteWorker, add_columns

_LOGGER = logging.getLogger(__name__)

DEFAULT_RETENTION_DAYS = 90
# Columns the first audit table lacked; open() adds them to an older file (idempotent).
ADDED_COLUMNS = {"before_json": "TEXT", "after_json": "TEXT", "request_id": "TEXT"}
_LEGACY_ACTOR = "admin"  # what every entry said before actors were told apart


class Recorder(Protocol):
    """What a feature needs to record its actions (``AuditLog`` is one; tests may pass their own)."""

    async def record(self, action: str, subject: str = "", *, before: Any = None, after: Any = None,
                     detail: str = "", actor: str | None = None) -> None: ...


@dataclass(frozen=True)
class AuditQuery:
    since: float | None = None
    until: float | None = None
    actor: str | None = None
    action: str | None = None   # exact, or a group: "model" matches model.add, model.update, ...
    subject: str | None = None
    limit: int = DEFAULT_LIMIT
    before: int | None = None   # entries with a smaller id (the next, older page)


class AuditLog(SqliteWorker):
    """Its own connection to ``history.sqlite`` on its own thread (``daemon.sqlite_worker``)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        super().__init__(path, "audit")
        self._clock = clock

    # --- lifecycle ----------------------------------------------------------------------------
    async def open(self) -> None:
        await self._run(self._connect)

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self._path, check_same_thread=False, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            migrate(db)
            self._db = db
        return self._db

    # --- writes -------------------------------------------------------------------------------
    async def record(self, action: str, subject: str = "", *, before: Any = None, after: Any = None,
                     detail: str = "", actor: str | None = None) -> None:
        """One admin action: ``action`` done to ``subject`` by ``actor`` (default: who acts now)."""
        try:
            row = (self._clock(), actor or current_actor(), action, subject or "", scrub(detail or ""),
                   to_json(before), to_json(after), CURRENT_REQUEST_ID.get())
            await self._run(self._insert, row)
        except Exception:  # the action happened; losing its entry must not undo it
            _LOGGER.exception("audit: could not record %s %s", action, subject)

    def _insert(self, row: tuple[Any, ...]) -> None:
        db = self._connect()
        with db:
            db.execute("INSERT INTO audit (ts, actor, action, subject, detail, before_json, after_json, request_id)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)

    async def prune(self, retention_days: float, now: float | None = None) -> int:
        """Drop entries older than ``retention_days``; the number dropped."""
        cutoff = (now if now is not None else self._clock()) - retention_days * 86400
        removed: int = await self._run(self._prune, cutoff)
        if removed:
            _LOGGER.info("audit: dropped %d entries older than %g days", removed, retention_days)
        return removed

    def _prune(self, cutoff: float) -> int:
        db = self._connect()
        with db:
            return db.execute("DELETE FROM audit WHERE ts < ?", (cutoff,)).rowcount

    # --- reads --------------------------------------------------------------------------------
    async def query(self, query: AuditQuery) -> AuditPage:
        rows: list[tuple[Any, ...]] = await self._run(self._select, query)
        entries = [_entry(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return AuditPage(entries=entries, next_before=entries[-1].id if more and entries else None)

    def _select(self, query: AuditQuery) -> list[tuple[Any, ...]]:
        where, args = _where(query)
        sql = ("SELECT rowid, ts, actor, action, subject, detail, before_json, after_json, request_id FROM audit"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY rowid DESC LIMIT ?")
        return self._connect().execute(sql, (*args, query.limit + 1)).fetchall()


def migrate(db: sqlite3.Connection) -> None:
    """Create the audit table, or bring an older one up to date (it keeps its rows)."""
    db.execute("CREATE TABLE IF NOT EXISTS audit (ts REAL, actor TEXT, action TEXT, subject TEXT, detail TEXT)")
    add_columns(db, "audit", ADDED_COLUMNS, "audit")
    db.execute("CREATE INDEX IF NOT EXISTS audit_ts ON audit(ts)")
    db.commit()


def _where(query: AuditQuery) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if query.since is not None:
        where.append("ts >= ?")
        args.append(query.since)
    if query.until is not None:
        where.append("ts <= ?")
        args.append(query.until)
    if query.actor:
        if query.actor == ACTOR_ADMIN_TOKEN:
            where.append("actor IN (?, ?)")
            args += [ACTOR_ADMIN_TOKEN, _LEGACY_ACTOR]
        else:
            where.append("actor = ?")
            args.append(query.actor)
    if query.action:
        where.append("(action = ? OR substr(action, 1, ?) = ?)")
        args += [query.action, len(query.action) + 1, query.action + "."]
    if query.subject:
        where.append("subject = ?")
        args.append(query.subject)
    if query.before is not None:
        where.append("rowid < ?")
        args.append(query.before)
    return where, args


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _entry(row: tuple[Any, ...]) -> AuditEntry:
    rowid, ts, actor, action, subject, detail, before, after, request_id = row
    return AuditEntry(id=rowid, ts=ts, actor=ACTOR_ADMIN_TOKEN if actor == _LEGACY_ACTOR else (actor or ""),
                      action=action or "", subject=subject or "", detail=detail or "",
                      before=_loads(before), after=_loads(after), request_id=request_id)
