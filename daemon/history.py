"""Metrics history, the access log and the audit trail in SQLite (WAL), off the event loop.

Raw samples (every telemetry tick) are kept for two hours; one-minute averages for eight days.
Ranges of an hour or less are read from raw samples, longer ones from the averages; either way a
series is bucketed to at most ~600 points so a chart stays light.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from daemon.api.access_log import RequestFilters
from daemon.api.models import HistoryPoint, HistoryRange, HistorySeries, RequestRecord
from daemon.audit.log import Recorder
from daemon.sqlite_worker import SqliteWorker, add_columns

_LOGGER = logging.getLogger(__name__)

MODEL_METRICS = ("gen_tps", "prompt_tps", "requests_running", "requests_waiting", "kv_cache_ratio",
                 "rss_bytes", "cpu_percent", "gpu_mem_bytes", "gpu_util_percent")
NODE_METRICS = ("cpu_percent", "mem_used_bytes", "mem_total_bytes", "gpu_mem_used_bytes",
                "gpu_mem_total_bytes", "gpu_util_percent")
# One GPU of one node; the subject is "{node id}/{GPU UUID or index}" (daemon.telemetry.gpu_subject).
GPU_METRICS = ("mem_used_bytes", "mem_total_bytes", "util_percent", "temperature_c", "power_w")
RANGE_SECONDS: dict[str, int] = {"5m": 300, "1h": 3600, "24h": 86400, "7d": 7 * 86400}
RAW_KEEP_S = 2 * 3600
ROLLUP_KEEP_S = 8 * 86400
REQUESTS_KEEP_S = 30 * 86400
MAX_POINTS = 600
_TABLES = {"model": MODEL_METRICS, "node": NODE_METRICS, "gpu": GPU_METRICS}
# Access-log columns in RequestRecord's field order; the ones after completion_tokens came later
# and are added to an older file by _migrate_requests, which keeps its rows.
REQUEST_COLUMNS = ("id", "ts", "model", "node", "path", "status", "queue_ms", "ttft_ms", "total_ms",
                   "prompt_tokens", "completion_tokens", "key_id", "error", "answered_by")
REQUEST_COLUMNS_ADDED = {"key_id": "TEXT", "error": "TEXT", "answered_by": "TEXT"}


def _schema() -> str:
    parts = ["PRAGMA journal_mode=WAL;", "PRAGMA synchronous=NORMAL;"]
    for kind, metrics in _TABLES.items():
        cols = ", ".join(f"{m} REAL" for m in metrics)
        parts.append(f"CREATE TABLE IF NOT EXISTS {kind}_raw (ts REAL, subject TEXT, {cols});")
        parts.append(f"CREATE INDEX IF NOT EXISTS {kind}_raw_idx ON {kind}_raw(subject, ts);")
        parts.append(f"CREATE TABLE IF NOT EXISTS {kind}_minute (ts REAL, subject TEXT, {cols},"
                     " PRIMARY KEY (subject, ts));")
    parts.append("CREATE TABLE IF NOT EXISTS requests (id TEXT, ts REAL, model TEXT, node TEXT, path TEXT,"
                 " status INTEGER, queue_ms REAL, ttft_ms REAL, total_ms REAL, prompt_tokens INTEGER,"
                 " completion_tokens INTEGER);")
    parts.append("CREATE INDEX IF NOT EXISTS requests_ts ON requests(ts);")
    parts.append("CREATE TABLE IF NOT EXISTS audit (ts REAL, actor TEXT, action TEXT, subject TEXT, detail TEXT);")
    return "\n".join(parts)


def _migrate_requests(db: sqlite3.Connection) -> None:
    """Add the access-log columns an older file lacks (idempotent: a half-done run just resumes)."""
    add_columns(db, "requests", REQUEST_COLUMNS_ADDED, "history")
    db.execute("CREATE INDEX IF NOT EXISTS requests_key ON requests(key_id, ts)")
    # GET /api/requests/{id}: a lookup by X-Request-Id, not a scan of 30 days of rows.
    db.execute("CREATE INDEX IF NOT EXISTS requests_id ON requests(id, ts)")
    db.commit()


class History(SqliteWorker):
    """All SQLite work runs on one dedicated thread (``daemon.sqlite_worker``); callers await it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "history")
        self._pending_requests: list[tuple[Any, ...]] = []
        self._last_rollup = 0.0
        self.recorder: Recorder | None = None  # the audit log, where History.audit's entries go

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        self._db = sqlite3.connect(self._path, check_same_thread=False)
        self._db.executescript(_schema())
        _migrate_requests(self._db)

    async def close(self) -> None:
        await self.flush()
        await super().close()

    # --- writes -------------------------------------------------------------------------------
    async def add_samples(self, kind: str, ts: float, rows: dict[str, dict[str, float | None]]) -> None:
        """One tick: ``rows`` maps a subject (model id or node id) to its metric values."""
        metrics = _TABLES[kind]
        values = [(ts, subject, *(row.get(m) for m in metrics)) for subject, row in rows.items()]
        if values:
            await self._run(self._insert_samples, kind, metrics, values)

    def _insert_samples(self, kind: str, metrics: tuple[str, ...], values: list[tuple[Any, ...]]) -> None:
        assert self._db is not None
        marks = ", ".join("?" * (len(metrics) + 2))
        with self._db:
            self._db.executemany(f"INSERT INTO {kind}_raw VALUES ({marks})", values)

    def record_request(self, record: RequestRecord) -> None:
        """Queue one access-log row; written in batches by ``flush``."""
        self._pending_requests.append(tuple(getattr(record, column) for column in REQUEST_COLUMNS))

    def record_request_row(self, row: tuple[Any, ...]) -> None:
        """``record_request`` for the router's hot path: the values already in REQUEST_COLUMNS order."""
        self._pending_requests.append(row)

    async def audit(self, actor: str, action: str, subject: str = "", detail: str = "", *,
                    before: Any = None, after: Any = None) -> None:
        """An admin action for the audit log: handed to ``recorder`` (``daemon.audit.log.AuditLog``,
        set by ``daemon.deps``), where actor "admin" means whoever is acting now (the request's client,
        else the daemon itself); without one, a plain row as before."""
        if self.recorder is not None:
            await self.recorder.record(action, subject, before=before, after=after, detail=detail,
                                       actor=None if actor == "admin" else actor)
            return
        await self._run(self._audit, (time.time(), actor, action, subject, detail))

    def _audit(self, row: tuple[Any, ...]) -> None:
        assert self._db is not None
        with self._db:
            self._db.execute("INSERT INTO audit (ts, actor, action, subject, detail) VALUES (?, ?, ?, ?, ?)", row)

    async def flush(self) -> None:
        rows, self._pending_requests = self._pending_requests, []
        if rows:
            await self._run(self._insert_requests, rows)

    def _insert_requests(self, rows: list[tuple[Any, ...]]) -> None:
        assert self._db is not None
        with self._db:
            self._db.executemany(f"INSERT INTO requests ({', '.join(REQUEST_COLUMNS)})"
                                 f" VALUES ({', '.join('?' * len(REQUEST_COLUMNS))})", rows)

    async def maintain(self, now: float | None = None) -> None:
        """Roll raw samples up into minute averages and drop what is past retention."""
        await self._run(self._maintain, now or time.time())

    def _maintain(self, now: float) -> None:
        assert self._db is not None
        with self._db:
            for kind, metrics in _TABLES.items():
                avgs = ", ".join(f"AVG({m})" for m in metrics)
                # Whole minutes not yet rolled up (the current minute is still filling).
                self._db.execute(
                    f"INSERT OR REPLACE INTO {kind}_minute SELECT CAST(ts / 60 AS INTEGER) * 60, subject, {avgs}"
                    f" FROM {kind}_raw WHERE ts < ? AND ts >= ? GROUP BY subject, CAST(ts / 60 AS INTEGER)",
                    (now // 60 * 60, now // 60 * 60 - 3600))
                self._db.execute(f"DELETE FROM {kind}_raw WHERE ts < ?", (now - RAW_KEEP_S,))
                self._db.execute(f"DELETE FROM {kind}_minute WHERE ts < ?", (now - ROLLUP_KEEP_S,))
            self._db.execute("DELETE FROM requests WHERE ts < ?", (now - REQUESTS_KEEP_S,))

    # --- reads --------------------------------------------------------------------------------
    async def series(self, kind: str, subject: str, range_: HistoryRange,
                     now: float | None = None) -> HistorySeries:
        return await self._run(self._series, kind, subject, range_, now or time.time())

    def _series(self, kind: str, subject: str, range_: HistoryRange, now: float) -> HistorySeries:
        assert self._db is not None
        metrics = _TABLES[kind]
        span = RANGE_SECONDS[range_]
        table = f"{kind}_raw" if span <= 3600 else f"{kind}_minute"
        step = max(span / MAX_POINTS, 2.0 if span <= 3600 else 60.0)
        avgs = ", ".join(f"AVG({m})" for m in metrics)
        rows = self._db.execute(
            f"SELECT MIN(ts), {avgs} FROM {table} WHERE subject = ? AND ts >= ?"
            f" GROUP BY CAST(ts / ? AS INTEGER) ORDER BY 1", (subject, now - span, step)).fetchall()
        points = [HistoryPoint(ts=row[0], values=dict(zip(metrics, row[1:], strict=True))) for row in rows]
        return HistorySeries(subject=subject, range=range_, step_s=step, points=points)

    async def recent_requests(self, limit: int, filters: RequestFilters | None = None) -> list[RequestRecord]:
        """Up to ``limit`` access-log rows, newest first, those ``filters`` match (its own limit aside)."""
        await self.flush()
        rows = await self._run(self._recent, limit, filters or RequestFilters())
        return [_record(row) for row in rows]

    def _recent(self, limit: int, filters: RequestFilters) -> list[tuple[Any, ...]]:
        assert self._db is not None
        where, args = _where(filters)
        return self._db.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests{where} ORDER BY ts DESC LIMIT ?",
                                (*args, limit)).fetchall()

    async def request(self, request_id: str) -> RequestRecord | None:
        """The row of the request with this X-Request-Id (the latest, should a client reuse an id)."""
        await self.flush()
        row = await self._run(self._one, request_id)
        return None if row is None else _record(row)

    def _one(self, request_id: str) -> tuple[Any, ...] | None:
        assert self._db is not None
        row: tuple[Any, ...] | None = self._db.execute(
            f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests WHERE id = ? ORDER BY ts DESC LIMIT 1",
            (request_id,)).fetchone()
        return row

    async def key_usage(self, since: float) -> dict[str, tuple[int, int]]:
        """Per API key id: (requests, prompt + completion tokens) in the access log since ``since``."""
        await self.flush()
        rows = await self._run(self._key_usage, since)
        return {key_id: (requests, tokens) for key_id, requests, tokens in rows}

    def _key_usage(self, since: float) -> list[tuple[str, int, int]]:
        assert self._db is not None
        return self._db.execute(
            "SELECT key_id, COUNT(*), COALESCE(SUM(COALESCE(prompt_tokens, 0) + COALESCE(completion_tokens, 0)), 0)"
            " FROM requests WHERE key_id IS NOT NULL AND ts >= ? GROUP BY key_id", (since,)).fetchall()


def _record(row: tuple[Any, ...]) -> RequestRecord:
    return RequestRecord.model_validate(dict(zip(REQUEST_COLUMNS, row, strict=True)))


def _where(filters: RequestFilters) -> tuple[str, list[Any]]:
    """The WHERE clause of ``filters`` (with a leading space, or empty) and its arguments."""
    clauses: list[str] = []
    args: list[Any] = []
    if filters.model is not None:
        clauses.append("(model = ? OR answered_by = ?)")
        args += [filters.model, filters.model]
    if filters.key_id is not None:
        clauses.append("key_id = ?")
        args.append(filters.key_id)
    statuses = filters.status_range()
    if statuses is not None:
        clauses.append("status BETWEEN ? AND ?")
        args += statuses
    if filters.slower_than_ms is not None:
        clauses.append("total_ms > ?")
        args.append(filters.slower_than_ms)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args
