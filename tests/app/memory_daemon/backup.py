"""The demo daemon's backups (create, list, download, preview and apply a restore), mixed into
``memory_daemon.DemoDaemon``.

Like the daemon: a backup is the ``daemon.api.backup`` document of the demo's models, keys (no
secrets) and settings; with a passphrase it carries an encrypted section whose check the restore
holds the passphrase to (a wrong one is ``backup_wrong_passphrase``), and the preview compares
item by item. The demo encrypts nothing for real: its section is a marker, never a secret.
None at first. Every model file is on its node in the demo:
``restore_missing_files`` (empty) is what a preview lists as missing, and a test may set it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from daemon.api.backup import (
    BACKUP_FORMAT,
    BACKUP_VERSION,
    BackupDocument,
    BackupFile,
    BackupKey,
    BackupListing,
    EncryptedSection,
    KdfParams,
    MissingFile,
    PreviewRow,
    RestorePreview,
    RestoreResult,
    RowChange,
)
from daemon.api.client import DaemonError
from daemon.api.models import (
    ApiKeyInfo,
    DaemonSettings,
    ModelDefinition,
    ModelState,
    ModelStatus,
)

_DAY_S = 86400.0


def _check(salt: str, passphrase: str) -> str:
    return base64.b64encode(hashlib.sha256(f"{salt}:{passphrase}".encode()).digest()).decode()


def _changed(current: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(current) | set(wanted) if current.get(k) != wanted.get(k))


class DemoBackups:
    definitions: dict[str, ModelDefinition]
    statuses: dict[str, ModelStatus]
    keys: dict[str, ApiKeyInfo]
    settings: DaemonSettings
    home: str

    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def restore_missing_files(self) -> list[MissingFile]:
        """The model files a restore's preview says are not on their nodes (a test may add its own)."""
        found: list[MissingFile] = self.__dict__.setdefault("_demo_missing_files", [])
        return found

    @property
    def backup_files(self) -> dict[str, tuple[float, str]]:
        """name -> (written at, text); a test may add its own."""
        files: dict[str, tuple[float, str]] | None = self.__dict__.get("_demo_backups")
        if files is None:
            files = self.__dict__["_demo_backups"] = {}
        return files

    @staticmethod
    def _backup_name(at: float) -> str:
        return f"mirbadllm-backup-workstation-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(at))}.json"

    def _document(self, passphrase: str | None, at: float) -> str:
        keys = [BackupKey(id=k.id, name=k.name, prefix=k.prefix, sha256=hashlib.sha256(k.id.encode()).hexdigest(),
                          created_at=k.created_at, limits=k.limits.model_dump(exclude_none=True))
                for k in self.keys.values()]
        secrets = None
        if passphrase is not None:
            if len(passphrase) < 8:
                raise DaemonError(422, "passphrase_too_short", "A backup passphrase has at least 8 characters.")
            salt = base64.b64encode(hashlib.sha256(str(at).encode()).digest()[:16]).decode()
            secrets = EncryptedSection(kdf=KdfParams(name="scrypt", salt=salt, n=2**17, r=8, p=1),
                                       check=_check(salt, passphrase), nonce=base64.b64encode(bytes(12)).decode(),
                                       ciphertext=base64.b64encode(b"demo: nothing secret here").decode())
        doc = BackupDocument(created_at=at, host="workstation", daemon_version="0.1.0",
                             models=[d.model_dump(mode="json") for d in self.definitions.values()], keys=keys,
                             settings=self.settings.model_dump(mode="json"), secrets=secrets)
        return doc.model_dump_json(indent=1)

    async def create_backup(self, passphrase: str | None = None) -> str:
        self._record("create_backup")
        return self._document(passphrase, time.time())

    async def save_backup(self, passphrase: str | None = None) -> BackupFile:
        self._record("save_backup")
        at = time.time()
        text = self._document(passphrase, at)
        name = self._backup_name(at)
        self.backup_files[name] = (at, text)
        for old in sorted(self.backup_files, key=lambda n: self.backup_files[n][0])[:-self.settings.backup.keep]:
            del self.backup_files[old]
        self._publish("backup.created", None, name=name, encrypted=passphrase is not None)
        return BackupFile(name=name, size=len(text), created_at=at, encrypted=passphrase is not None)

    async def list_backups(self) -> BackupListing:
        self._record("list_backups")
        files = [BackupFile(name=n, size=len(text), created_at=at, encrypted='"ciphertext"' in text)
                 for n, (at, text) in self.backup_files.items()]
        backup = self.settings.backup
        return BackupListing(directory=backup.directory or f"{self.home}/backups", enabled=backup.enabled,
                             keep=backup.keep, files=sorted(files, key=lambda f: f.created_at, reverse=True))

    async def download_backup(self, name: str) -> str:
        self._record("download_backup", name)
        if name not in self.backup_files:
            raise DaemonError(404, "backup_not_found", f"No backup named {name}.")
        return self.backup_files[name][1]

    def _parse(self, document: str, passphrase: str | None) -> BackupDocument:
        try:
            raw = json.loads(document)
        except ValueError:
            raise DaemonError(400, "backup_invalid_json", "The backup is not valid JSON.") from None
        if not isinstance(raw, dict) or raw.get("format") != BACKUP_FORMAT:
            raise DaemonError(422, "backup_invalid", "This is not a MirbadLLM backup.")
        if raw.get("version") != BACKUP_VERSION:
            raise DaemonError(422, "backup_unknown_version", f"The backup's version is {raw.get('version')!r}.")
        try:
            doc = BackupDocument.model_validate(raw)
        except ValidationError:
            raise DaemonError(422, "backup_invalid", "The backup is damaged.") from None
        if doc.secrets is not None and passphrase is not None \
                and _check(doc.secrets.kdf.salt, passphrase) != doc.secrets.check:
            raise DaemonError(422, "backup_wrong_passphrase", "The passphrase does not open this backup.")
        return doc

    def _rows(self, doc: BackupDocument) -> list[PreviewRow]:
        rows = []
        for raw in doc.models:
            wanted = ModelDefinition.model_validate(raw)
            current = self.definitions.get(wanted.id)
            fields = [] if current is None else _changed(current.model_dump(mode="json"), wanted.model_dump(mode="json"))
            change: RowChange = "new" if current is None else "changed" if fields else "identical"
            rows.append(PreviewRow(kind="model", id=wanted.id, label=wanted.served_name, change=change, fields=fields))
        for key in doc.keys:
            rows.append(PreviewRow(kind="key", id=key.id, label=key.name,
                                   change="identical" if key.id in self.keys else "new"))
        current_settings = self.settings.model_dump(mode="json")
        fields = _changed(current_settings, {**current_settings, **doc.settings})
        rows.append(PreviewRow(kind="settings", id="settings", label="settings",
                               change="changed" if fields else "identical", fields=fields))
        return rows

    async def preview_restore(self, document: str, passphrase: str | None = None,
                              replace_ca: bool = False) -> RestorePreview:
        self._record("preview_restore", passphrase is not None, replace_ca)
        doc = self._parse(document, passphrase)
        return RestorePreview(version=doc.version, created_at=doc.created_at, host=doc.host,
                              encrypted=doc.secrets is not None, rows=self._rows(doc),
                              missing_files=list(self.restore_missing_files))

    async def restore_backup(self, document: str, passphrase: str | None = None,
                             replace_ca: bool = False, downloads: bool = True) -> RestoreResult:
        self._record("restore_backup", passphrase is not None, replace_ca, downloads)  # demo: every file is here
        doc = self._parse(document, passphrase)
        rows, applied = self._rows(doc), 0
        for raw in doc.models:
            wanted = ModelDefinition.model_validate(raw)
            if self.definitions.get(wanted.id) != wanted:
                new = wanted.id not in self.definitions
                self.definitions[wanted.id] = wanted
                self.statuses.setdefault(wanted.id, ModelStatus(id=wanted.id, served_name=wanted.served_name,
                                                                state=ModelState.STOPPED))
                self._publish("model.added" if new else "model.updated", wanted.id)
                applied += 1
        for key in doc.keys:
            if key.id not in self.keys:
                self.keys[key.id] = ApiKeyInfo(id=key.id, name=key.name, prefix=key.prefix, created_at=key.created_at)
                applied += 1
        settings = DaemonSettings.model_validate({**self.settings.model_dump(mode="json"), **doc.settings})
        if settings != self.settings:
            self.settings = settings
            applied += 1
        self._publish("backup.restored", None, applied=applied, failed=0, restart_required=False)
        missing = [m.model_copy(update={"transfer": f"x{n}"}) if downloads and m.state == "missing"
                   and m.fetch != "by_hand" else m for n, m in enumerate(self.restore_missing_files, 1)]
        return RestoreResult(rows=rows, applied=applied, missing_files=missing,
                             transfers=[m.transfer for m in missing if m.transfer])
