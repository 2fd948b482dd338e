"""``BackupService``: make a backup of this daemon, list and read the saved ones, preview and apply a restore.

A backup names its file ``mirbadllm-backup-<host>-<UTC stamp>.json`` and is written atomically
(temp file, fsync, rename; mode 0600) into the backup directory: ``[backup] directory`` when set
(it must exist: a share that is not mounted is a failure, not a silent write to the local disk),
else ``<home>/backups`` (created). Only names of that shape inside that directory are ever read.

Passphrases are used and dropped: never logged, never in an event, an audit entry or an answer.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from pathlib import Path

from core.json_store import write_atomic
from daemon.api.audit import ACTOR_SYSTEM
from daemon.api.backup import (
    BACKUP_NAME_PATTERN,
    MAX_BACKUP_BYTES,
    BackupFile,
    BackupSecrets,
    MissingFile,
    RestorePreview,
    RestoreResult,
)
from daemon.api.program import program_version
from daemon.audit.log import Recorder
from daemon.backup import ca as backup_ca
from daemon.backup import document
from daemon.backup.errors import BackupRefused
from daemon.backup.files import ModelFiles
from daemon.backup.restore import Owners, Plan, apply_plan, plan_restore
from daemon.models.external import KeyUnreadable, read_key

_LOGGER = logging.getLogger(__name__)

_NAME = re.compile(BACKUP_NAME_PATTERN)


def _secrets_note(passphrase: str | None) -> str:
    return "CA and secrets encrypted" if passphrase else "no secrets"


def host_label() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64].strip(".-") or "host"


class BackupService:
    def __init__(self, owners: Owners, home: Path, audit: Recorder, files: ModelFiles | None = None) -> None:
        self.owners = owners
        self._files = files  # the restored models' files on their nodes (daemon.backup.files)
        self._home = home
        self._audit = audit  # daemon.audit.log.AuditLog: who backed up or restored what
        self._lock = asyncio.Lock()  # one backup or restore at a time
        self.last_error: str | None = None  # of the last scheduled run (BackupScheduler)

    # --- where ----------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        configured = self.owners.config.backup.directory
        return Path(configured) if configured else self._home / "backups"

    def _ready_directory(self) -> Path:
        directory = self.directory
        if not self.owners.config.backup.directory:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        elif not directory.is_dir():
            raise BackupRefused(409, "backup_directory_missing", f"The backup directory {directory} does not exist "
                                "(is the share mounted?); nothing was written.")
        return directory

    def files(self) -> list[BackupFile]:
        """The backups in the directory, newest first."""
        found = []
        try:
            entries = list(self.directory.iterdir())
        except OSError:
            return []
        for path in entries:
            if not _NAME.fullmatch(path.name) or path.is_symlink() or not path.is_file():
                continue  # a link (a shared folder someone else writes to) may point at any file
            try:
                stat = path.stat()
                data = path.read_bytes() if stat.st_size <= MAX_BACKUP_BYTES else b""
            except OSError:
                continue
            found.append(BackupFile(name=path.name, size=stat.st_size, created_at=stat.st_mtime,
                                    encrypted=b'"ciphertext"' in data))
        return sorted(found, key=lambda f: (f.created_at, f.name), reverse=True)

    def read(self, name: str) -> bytes:
        if not _NAME.fullmatch(name):
            raise BackupRefused(404, "backup_not_found", "No backup of that name.")
        path = self.directory / name
        try:
            if path.is_symlink():  # never served through a link: it may point at any file
                raise FileNotFoundError(name)
            return path.read_bytes()
        except OSError:
            raise BackupRefused(404, "backup_not_found", f"No backup named {name} in {self.directory}.") from None

    # --- create -----------------------------------------------------------------------------------
    def _contents(self) -> document.Contents:
        o = self.owners
        return document.Contents(
            models=[d.model_dump(mode="json") for d in o.registry.all()], keys=o.keys.export_records(),
            nodes=[n.model_dump(mode="json") for n in o.nodes.all()],
            settings=o.config.settings().model_dump(mode="json"))

    def _secrets(self) -> BackupSecrets:
        files: dict[str, str] = {}
        for definition in self.owners.registry.all():
            if definition.api_key_file:
                try:  # what the router reads of it (the first line, at most 16 KiB), as it reads it
                    files[definition.api_key_file] = read_key(definition.api_key_file) + "\n"
                except KeyUnreadable as exc:
                    _LOGGER.warning("backup: the key file of model %s is left out: %s", definition.id, exc)
        return BackupSecrets(ca=backup_ca.read_ca(self.owners.pki_dir),
                             daemon_client=backup_ca.read_client(self.owners.pki_dir), key_files=files)

    async def make(self, passphrase: str | None) -> bytes:
        """The backup's bytes (with ``passphrase``: the CA and secrets encrypted into it)."""
        contents, secrets = self._contents(), self._secrets() if passphrase is not None else None
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: document.build(contents, secrets, passphrase, created_at=time.time(), host=host_label(),
                                         daemon_version=program_version()))

    async def save(self, passphrase: str | None, *, scheduled: bool = False) -> BackupFile:
        """Write a backup into the directory (atomically) and record it."""
        async with self._lock:
            data = await self.make(passphrase)
            directory = self._ready_directory()
            path = self._new_path(directory)
            await asyncio.get_running_loop().run_in_executor(None, write_atomic, path, data, 0o600)
        await self._audit.record("backup.create", path.name, detail=_secrets_note(passphrase),
                                 actor=ACTOR_SYSTEM if scheduled else None)
        self.owners.events.publish("backup.created", None, name=path.name, encrypted=passphrase is not None)
        _LOGGER.info("backup written: %s", path)
        return BackupFile(name=path.name, size=len(data), created_at=path.stat().st_mtime,
                          encrypted=passphrase is not None)

    def _new_path(self, directory: Path) -> Path:
        stem = f"mirbadllm-backup-{host_label()}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        path, n = directory / f"{stem}.json", 1
        while path.exists():
            path, n = directory / f"{stem}-{n}.json", n + 1
        return path

    async def answered(self, passphrase: str | None) -> bytes:
        """A backup to hand to the caller (a download), recorded like a saved one."""
        data = await self.make(passphrase)
        await self._audit.record("backup.create", "download", detail=_secrets_note(passphrase))
        return data

    def prune(self, keep: int) -> list[str]:
        """Delete all but the ``keep`` newest backups in the directory; the names deleted."""
        dropped = []
        for old in self.files()[keep:]:
            try:
                (self.directory / old.name).unlink()
                dropped.append(old.name)
            except OSError as exc:
                _LOGGER.warning("could not delete the old backup %s: %s", old.name, exc)
        return dropped

    # --- restore ----------------------------------------------------------------------------------
    async def _plan(self, text: str, passphrase: str | None, replace_ca: bool) -> tuple[document.ParsedBackup, Plan]:
        parsed = document.parse(text)
        secrets = None
        if passphrase is not None and parsed.encrypted:
            secrets = await asyncio.get_running_loop().run_in_executor(
                None, document.open_secrets, parsed, passphrase)
        plan = plan_restore(self.owners, parsed, secrets, replace_ca)
        if self._files is not None:
            await self._files.keep_placed(plan)
        return parsed, plan

    async def preview(self, text: str, passphrase: str | None, replace_ca: bool = False) -> RestorePreview:
        parsed, plan = await self._plan(text, passphrase, replace_ca)
        doc = parsed.document
        missing = await self._files.missing(plan.definitions) if self._files else []
        return RestorePreview(version=doc.version, created_at=doc.created_at, host=doc.host,
                              encrypted=parsed.encrypted, rows=plan.rows, missing_files=missing)

    async def restore(self, text: str, passphrase: str | None, replace_ca: bool = False,
                      downloads: bool = True) -> RestoreResult:
        """Apply the plan; then check the restored models' files, and with ``downloads`` fetch those that can be."""
        async with self._lock:
            parsed, plan = await self._plan(text, passphrase, replace_ca)
            done = await apply_plan(self.owners, plan)
            missing: list[MissingFile] = []
            if self._files is not None:
                restored = [d for d in plan.definitions if self.owners.registry.get(d.id) is not None]
                missing = await self._files.missing(restored)
                if downloads:
                    missing = await self._files.fetch(missing)
        summary = f"{done.applied} applied, {len(done.failed)} refused, from {parsed.document.host}"
        changed = [f"{r.kind} {r.id}" for r in plan.rows if r.change in ("new", "changed")]
        await self._audit.record("backup.restore", parsed.document.host, detail=summary,
                                 after={"changed": changed, "refused": done.failed})
        self.owners.events.publish("backup.restored", None, applied=done.applied, failed=len(done.failed),
                                   restart_required=done.restart_required)
        _LOGGER.info("restored a backup of %s: %s", parsed.document.host, summary)
        return RestoreResult(rows=plan.rows, applied=done.applied, failed=done.failed,
                             restart_required=done.restart_required, missing_files=missing,
                             transfers=[m.transfer for m in missing if m.transfer])
