"""Stored job results: ``benchmarks/{model}/{stamp}.json`` and ``tuning/{model}/{stamp}.json``.

A job's id is ``{kind}.{model}.{stamp}`` (model ids have no dots), so a stored result is found from
its id alone. ``tuning/active.json`` marks a tuning run in progress, so a daemon that died during
one can put the model back at the next boot.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.json_store import write_json_atomic
from daemon.api.jobs import BenchmarkResult, TuningResult

_LOGGER = logging.getLogger(__name__)

Result = BenchmarkResult | TuningResult
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
_DIRS = {"benchmark": "benchmarks", "tune": "tuning"}


def job_id(kind: str, model: str, stamp: str) -> str:
    return f"{kind}.{model}.{stamp}"


def split_job_id(value: str) -> tuple[str, str, str]:
    """(kind, model, stamp) of a job id; ValueError when it is not one."""
    parts = value.split(".")
    if len(parts) != 3 or parts[0] not in _DIRS or not all(parts):
        raise ValueError(f"'{value}' is not a job id (kind.model.stamp)")
    return parts[0], parts[1], parts[2]


class JobStore:
    def __init__(self, home: Path) -> None:
        self.home = home

    def folder(self, kind: str, model: str) -> Path:
        return self.home / _DIRS[kind] / model

    def new_stamp(self, kind: str, model: str, now: float | None = None) -> str:
        """A UTC stamp no stored result of this model uses yet."""
        base = time.strftime(STAMP_FORMAT, time.gmtime(now if now is not None else time.time()))
        stamp, n = base, 1
        while (self.folder(kind, model) / f"{stamp}.json").exists():
            n += 1
            stamp = f"{base}-{n}"
        return stamp

    def save(self, result: Result) -> Path:
        path = self.folder(result.kind, result.model) / f"{result.stamp}.json"
        write_json_atomic(path, result.model_dump(mode="json"), mode=0o644)
        return path

    def load(self, kind: str, model: str, stamp: str) -> Result | None:
        path = self.folder(kind, model) / f"{stamp}.json"
        return _read(path, kind)

    def list(self, model: str | None = None, kind: str | None = None) -> list[Result]:
        """Stored results, newest first; unreadable files are skipped with a warning."""
        found: list[Result] = []
        for k, folder_name in _DIRS.items():
            if kind is not None and k != kind:
                continue
            root = self.home / folder_name
            folders = [root / model] if model else [p for p in root.glob("*") if p.is_dir()]
            for folder in folders:
                for path in folder.glob("*.json"):
                    result = _read(path, k)
                    if result is not None:
                        found.append(result)
        return sorted(found, key=lambda r: r.started_at, reverse=True)

    # --- the tuning run in progress ------------------------------------------------------------
    @property
    def active_path(self) -> Path:
        return self.home / "tuning" / "active.json"

    def mark_active(self, marker: dict[str, Any]) -> None:
        write_json_atomic(self.active_path, marker)

    def read_active(self) -> dict[str, Any] | None:
        try:
            value = json.loads(self.active_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def clear_active(self) -> None:
        self.active_path.unlink(missing_ok=True)


def _read(path: Path, kind: str) -> Result | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if kind == "benchmark":
            return BenchmarkResult.model_validate(data)
        return TuningResult.model_validate(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError) as exc:
        _LOGGER.warning("skipping unreadable job result %s: %s", path, exc)
        return None
