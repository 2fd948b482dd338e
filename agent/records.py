"""``processes.json``: what the agent needs to find its runtimes again after a restart.

Runtimes outlive the agent (own session, log file instead of a pipe). A record names the PID and
the process creation time and executable, so a PID the kernel has since handed to some other
program is never mistaken for ours. The file holds the per-instance API keys: it is 0600 and
written atomically (``core.json_store``: temp file + ``os.replace``).

Two owners share the file, each reading and writing its own part: the ``InstanceManager``'s models
(adopted by a later agent) and ``agent.rpc.servers``'s rpc-servers (``rpc_server`` records): those are
never adopted, a later agent stops them as leftovers (a split model cannot outlive its agents). A
record's kind is its ``rpc_server`` field, not its runtime's name (version 1 files told it by
``runtime: "rpc"``; they are read that way once).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, Field, ValidationError

from agent.api.backends import Offload
from core.json_store import JsonStore, UnreadableStore

_LOGGER = logging.getLogger(__name__)

RECORDS_VERSION = 2  # 2: a record says it is an rpc-server's (``rpc_server``); 1 said it by ``runtime: "rpc"``
# psutil derives the creation time from boot time + clock ticks: equal for one process, but a
# float; anything closer than this is the same start.
CREATE_TIME_TOLERANCE_S = 0.05
RPC_RUNTIME = "rpc"  # an rpc-server record's runtime: what version 1 (and an older agent) told one by


class ProcessRecord(BaseModel):
    """One running runtime, as stored (a storage shape, not a wire shape)."""

    instance_id: str
    runtime: str = Field(default="llamacpp", description="The driver that started it (records before 0.x: "
                         "llama.cpp); \"rpc\": an rpc-server.")
    rpc_server: bool = Field(default=False, description="An rpc-server's record (agent.rpc.servers), which a "
                             "later agent stops as a leftover; else a model's, which it adopts.")
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
    backend: str | None = Field(default=None, description="llama.cpp: the backend it computes on (cpu, vulkan, ...).")
    offload: Offload | None = Field(default=None, description="llama.cpp: where its load put the model (its log).")


class _RecordsFile(BaseModel):
    """Storage shape of ``processes.json``; each record is validated on its own, so one malformed
    record costs only itself."""

    version: int = 1  # what a file that says none is
    processes: list[Any] = []


class ProcessRecords:
    """Reads and writes ``processes.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store = JsonStore(path, _RecordsFile)
        self._last_written: bytes | None = None
        self._held: dict[str, ProcessRecord] | None = None  # both parts, as last read or written

    def load(self, rpc: bool = False) -> dict[str, ProcessRecord]:
        """The models' records (adoption's), or with ``rpc`` the rpc-servers' (the leftovers to stop)."""
        return {i: r for i, r in self._load_all().items() if r.rpc_server == rpc}

    def _load_all(self) -> dict[str, ProcessRecord]:
        try:
            data = self._store.read()
        except UnreadableStore as exc:
            _LOGGER.warning("ignoring unreadable %s: %s", self.path, exc)
            return {}
        records: dict[str, ProcessRecord] = {}
        version = data.version if data is not None else RECORDS_VERSION
        for item in data.processes if data is not None else []:
            if version < 2 and isinstance(item, dict):
                item = _from_version_1(item)
            try:
                record = ProcessRecord.model_validate(item)
            except ValidationError as exc:
                _LOGGER.warning("ignoring a malformed process record in %s: %s", self.path, exc)
                continue
            records[record.instance_id] = record
        return records

    def save(self, records: Mapping[str, ProcessRecord], rpc: bool = False) -> None:
        """Write the models' records (or with ``rpc`` the rpc-servers'), keeping the other part as it is
        (0600, atomically); skipped when nothing changed."""
        held = self._held if self._held is not None else self._load_all()
        self._held = {**{i: r for i, r in held.items() if r.rpc_server != rpc}, **records}
        body = self._store.encode(_RecordsFile(version=RECORDS_VERSION,
                                                processes=[r.model_dump() for _, r in sorted(self._held.items())]))
        if body == self._last_written:
            return
        self._store.write_bytes(body)
        self._last_written = body


def _from_version_1(item: dict[str, Any]) -> dict[str, Any]:
    """A version 1 record as version 2 holds it: an rpc-server's said so by its runtime's name."""
    return {**item, "rpc_server": item.get("runtime") == RPC_RUNTIME}


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
