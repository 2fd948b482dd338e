"""``processes.json``: what the agent needs to find its runtimes again after a restart.

Runtimes outlive the agent (own session, log file instead of a pipe). A record names the PID and
the process creation time and executable, so a PID the kernel has since handed to some other
program is never mistaken for ours. The file holds the per-instance API keys: it is 0600 and
written atomically (temp file + ``os.replace``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import psutil
from pydantic import BaseModel, Field, ValidationError

_LOGGER = logging.getLogger(__name__)

RECORDS_VERSION = 1
# psutil derives the creation time from boot time + clock ticks: equal for one process, but a
# float; anything closer than this is the same start.
CREATE_TIME_TOLERANCE_S = 0.05


class ProcessRecord(BaseModel):
    """One running runtime, as stored (a storage shape, not a wire shape)."""

    instance_id: str
    pid: int
    create_time: float
    executable: str = Field(description="What the agent launched (argv[0]).")
    process_exe: str | None = Field(default=None, description="What the kernel reported once it ran.")
    port: int
    api_key: str
    argv: list[str]
    model_path: str
    served_name: str
    config_hash: str
    started_at: float
    startup_timeout_s: float = 120.0


class ProcessRecords:
    """Reads and writes ``processes.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last_written: str | None = None

    def load(self) -> dict[str, ProcessRecord]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            _LOGGER.warning("ignoring unreadable %s: %s", self.path, exc)
            return {}
        records: dict[str, ProcessRecord] = {}
        for item in raw.get("processes", []) if isinstance(raw, dict) else []:
            try:
                record = ProcessRecord.model_validate(item)
            except ValidationError as exc:
                _LOGGER.warning("ignoring a malformed process record in %s: %s", self.path, exc)
                continue
            records[record.instance_id] = record
        return records

    def save(self, records: Mapping[str, ProcessRecord]) -> None:
        """Write the records (0600, atomically); skipped when nothing changed."""
        body = json.dumps({"version": RECORDS_VERSION,
                           "processes": [r.model_dump() for _, r in sorted(records.items())]}, indent=2)
        if body == self._last_written:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
        os.replace(tmp, self.path)
        self._last_written = body


def _same_file(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return os.path.realpath(a) == os.path.realpath(b)


def find_live_process(record: ProcessRecord) -> psutil.Process | None:
    """The recorded process if it still runs: same PID, creation time and executable."""
    try:
        proc = psutil.Process(record.pid)
        create_time = proc.create_time()
        status = proc.status()
        exe = proc.exe()
    except psutil.Error as exc:
        _LOGGER.info("record %s: pid %d is gone (%s)", record.instance_id, record.pid, type(exc).__name__)
        return None
    if status == psutil.STATUS_ZOMBIE:
        _LOGGER.info("record %s: pid %d has exited", record.instance_id, record.pid)
        return None
    if abs(create_time - record.create_time) > CREATE_TIME_TOLERANCE_S:
        _LOGGER.info("record %s: pid %d now belongs to another process (started at another time)",
                     record.instance_id, record.pid)
        return None
    expected = record.process_exe or record.executable
    if not _same_file(exe, expected):
        _LOGGER.info("record %s: pid %d runs %s, not %s", record.instance_id, record.pid, exe, expected)
        return None
    return proc
