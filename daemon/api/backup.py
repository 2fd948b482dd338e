"""Contracts of backup and restore (``daemon.backup``): the backup document and the admin API's bodies.

The document is one JSON file, ``format`` ``mirbadllm-backup`` at ``version`` ``BACKUP_VERSION``:

- ``models``: the registry's definitions, as ``models.json`` holds them;
- ``keys``: the API key records, their SHA-256 hashes only (a key's secret is never stored anywhere);
- ``nodes``: the paired nodes' non-secret records (address, the pinned agent certificate);
- ``settings``: the run-time ``DaemonSettings``;
- ``secrets`` (only with a passphrase): AES-256-GCM over ``BackupSecrets`` (the CA's key and
  certificate, the daemon's client key and certificate that paired agents pin, the external models'
  key files), its key derived from the passphrase by ``kdf``.
  The associated data binds the format, the version, the KDF parameters and a digest of the plain
  sections, so none of them can be changed without the restore noticing.

Routes (admin token): ``POST /api/backups`` (``BackupCreate`` -> the document, or ``BackupFile`` when
saved), ``GET /api/backups`` (``BackupListing``), ``GET /api/backups/{name}`` (the file),
``POST /api/backups/restore/preview`` and ``POST /api/backups/restore`` (``RestoreRequest`` ->
``RestorePreview`` / ``RestoreResult``). Both list ``missing_files``: the restored models whose file is
not on their node (``daemon.backup.files``); the restore, with ``downloads``, fetches those it can.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

BACKUP_FORMAT = "mirbadllm-backup"
BACKUP_VERSION = 1
BACKUP_NAME_PATTERN = r"^mirbadllm-backup-[A-Za-z0-9._-]{1,64}-\d{8}-\d{6}(-\d+)?\.json$"
MAX_BACKUP_BYTES = 16 * 1024 * 1024

# The weakest key derivation a backup may name; a file asking for less is refused (backup_weak_kdf).
SCRYPT_MIN_N, SCRYPT_MIN_R, SCRYPT_MIN_P = 2**17, 8, 1
PBKDF2_MIN_ITERATIONS = 600_000
MIN_SALT_BYTES = 16


class BackupSettings(BaseModel):
    """Daily backups (``[backup]`` in config.toml; ``DaemonSettings.backup``). Without a passphrase file
    a scheduled backup carries no secrets: no CA, no key files (models, key hashes, nodes, settings)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="Write a backup once a day.")
    directory: str = Field(default="", max_length=1000, description="Where (an absolute path that exists); empty: "
                                                                     "<home>/backups.")
    keep: int = Field(default=7, ge=1, le=365, description="Backups kept in the directory; older ones are deleted.")
    passphrase_file: str = Field(default="", max_length=1000, description="An absolute path to a file holding a "
                                 "passphrase: scheduled backups then carry the CA and secrets, encrypted. Empty: "
                                 "they carry no secrets.")

    @field_validator("directory", "passphrase_file")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not (value.startswith("/") or (len(value) > 2 and value[1] == ":")):
            raise ValueError("an absolute path, or empty")
        return value


class KdfParams(BaseModel):
    """How the passphrase becomes the key: scrypt (written) or PBKDF2-SHA256 (read)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["scrypt", "pbkdf2-sha256"]
    salt: str = Field(description="Base64.")
    n: int | None = Field(default=None, description="scrypt: CPU/memory cost.")
    r: int | None = Field(default=None, description="scrypt: block size.")
    p: int | None = Field(default=None, description="scrypt: parallelism.")
    iterations: int | None = Field(default=None, description="PBKDF2: iterations.")


class EncryptedSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kdf: KdfParams
    check: str = Field(description="Base64 HMAC of a constant under a key derived with the AES key: tells a "
                                   "wrong passphrase from altered ciphertext.")
    nonce: str = Field(description="Base64, 12 bytes.")
    ciphertext: str = Field(description="Base64 AES-256-GCM of BackupSecrets (JSON), tag appended.")


class BackupKey(BaseModel):
    """An API key record as a backup holds it: the hash, never the key."""

    id: str
    name: str
    prefix: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: float
    limits: dict[str, Any] = Field(default_factory=dict)


class BackupCa(BaseModel):
    key_pem: str
    cert_pem: str


class BackupSecrets(BaseModel):
    """The encrypted section's plaintext."""

    ca: BackupCa | None = None
    daemon_client: BackupCa | None = Field(default=None, description="The daemon's client key and certificate: "
                                           "paired agents pin this certificate, so it comes back with the CA.")
    key_files: dict[str, str] = Field(default_factory=dict, description="External models' key files: path -> "
                                                                         "content.")


class BackupDocument(BaseModel):
    """A parsed backup (``secrets`` still encrypted)."""

    format: Literal["mirbadllm-backup"] = "mirbadllm-backup"
    version: int = BACKUP_VERSION
    created_at: float
    host: str = ""
    daemon_version: str = ""
    models: list[dict[str, Any]] = Field(default_factory=list)
    keys: list[BackupKey] = Field(default_factory=list)
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict)
    secrets: EncryptedSection | None = None


# --- admin API ---------------------------------------------------------------------------------------
class BackupCreate(BaseModel):
    """``POST /api/backups``: with a passphrase the CA and secrets are included, encrypted."""

    model_config = ConfigDict(extra="forbid")

    passphrase: SecretStr | None = Field(default=None, description="At least 8 characters; never logged.")
    save: bool = Field(default=False, description="Write it into the backup directory (else: answer it).")


class BackupFile(BaseModel):
    name: str
    size: int
    created_at: float
    encrypted: bool


class BackupListing(BaseModel):
    directory: str
    enabled: bool
    keep: int
    files: list[BackupFile]
    last_error: str | None = None


class RestoreRequest(BaseModel):
    """``POST /api/backups/restore[/preview]``: the backup file's text, and its passphrase."""

    model_config = ConfigDict(extra="forbid")

    document: str = Field(max_length=MAX_BACKUP_BYTES, description="The backup file's text, as it is.")
    passphrase: SecretStr | None = None
    replace_ca: bool = Field(default=False, description="Take the backup's CA even though this daemon has "
                                                        "paired nodes of its own (fleet recovery).")
    downloads: bool = Field(default=True, description="Restore only: fetch the model files missing on their "
                                                      "nodes that can be fetched (Hugging Face, the demo package).")


RowKind = Literal["model", "key", "node", "settings", "ca", "secret"]
RowChange = Literal["new", "changed", "identical", "skipped"]


class PreviewRow(BaseModel):
    kind: RowKind
    id: str
    label: str
    change: RowChange
    fields: list[str] = Field(default_factory=list, description="changed: the fields that differ.")
    note: str | None = None


FileFetch = Literal["huggingface", "package", "by_hand"]


class MissingFile(BaseModel):
    """A restored model whose file is not on its node (``unchecked``: its node could not be asked)."""

    model_id: str
    node: str
    path: str
    state: Literal["missing", "unchecked"] = "missing"
    fetch: FileFetch = Field(description="huggingface / package: the restore can fetch it (its definition's "
                                         "sources); by_hand: copy it to the node at path.")
    source: str = Field(default="", description="hf:REPO/FILE@REVISION or package:NAME.")
    size: int | None = Field(default=None, description="Bytes, when the source said.")
    note: str = ""
    transfer: str | None = Field(default=None, description="Restore: the transfer fetching it (GET /api/transfers/"
                                                            "{id}).")


class RestorePreview(BaseModel):
    version: int
    created_at: float
    host: str
    encrypted: bool
    rows: list[PreviewRow]
    missing_files: list[MissingFile] = Field(default_factory=list, description="Model files not on their nodes.")


class RestoreResult(BaseModel):
    rows: list[PreviewRow]
    applied: int
    failed: list[str] = Field(default_factory=list, description="Items the owner refused, with why.")
    restart_required: bool = Field(default=False, description="The CA or nodes changed: they take effect "
                                                              "when the daemon starts again.")
    missing_files: list[MissingFile] = Field(default_factory=list, description="Model files not on their nodes, "
                                             "each with the transfer fetching it when one started.")
    transfers: list[str] = Field(default_factory=list, description="Ids of the downloads started.")
