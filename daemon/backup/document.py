"""The backup document: written from the daemon's parts, parsed (and refused) before any restore.

``parse`` refuses, each with its own code and before anything changes: text that is not JSON
(``backup_invalid_json``), JSON that is not a MirbadLLM backup or not its shape (``backup_invalid``),
a version this daemon does not know (``backup_unknown_version``), and KDF parameters below the
minimums (``backup_weak_kdf``). ``open_secrets`` then refuses a wrong passphrase
(``backup_wrong_passphrase``) and altered bytes (``backup_tampered``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from daemon.api.backup import (
    BACKUP_FORMAT,
    BACKUP_VERSION,
    BackupDocument,
    BackupKey,
    BackupSecrets,
)
from daemon.backup import crypto
from daemon.backup.errors import BackupRefused
from daemon.errors import validation_message

_LOGGER = logging.getLogger(__name__)

PLAIN_SECTIONS = ("models", "keys", "nodes", "settings")


@dataclass(frozen=True)
class Contents:
    """What a backup holds in clear (the secrets apart)."""

    models: list[dict[str, Any]]
    keys: list[BackupKey]
    nodes: list[dict[str, Any]]
    settings: dict[str, Any]


def plain_digest(raw: dict[str, Any]) -> str:
    """SHA-256 of the plain sections as JSON data (bound into the encrypted section's tag)."""
    return hashlib.sha256(crypto.canonical({k: raw.get(k) for k in PLAIN_SECTIONS})).hexdigest()


def build(contents: Contents, secrets: BackupSecrets | None, passphrase: str | None, *, created_at: float,
          host: str, daemon_version: str) -> bytes:
    """The document's bytes; with ``passphrase``, ``secrets`` sealed into it (blocking: the KDF)."""
    doc = BackupDocument(created_at=created_at, host=host, daemon_version=daemon_version, models=contents.models,
                         keys=contents.keys, nodes=contents.nodes, settings=contents.settings)
    raw = doc.model_dump(mode="json", exclude={"secrets"})
    if passphrase is not None:
        plaintext = (secrets or BackupSecrets()).model_dump_json().encode("utf-8")
        sealed = crypto.seal(plaintext, passphrase, BACKUP_FORMAT, BACKUP_VERSION, plain_digest(raw))
        raw["secrets"] = sealed.model_dump(mode="json")
    else:
        raw["secrets"] = None
    return json.dumps(raw, indent=1, sort_keys=True).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class ParsedBackup:
    document: BackupDocument
    digest: str  # of the plain sections as the file holds them

    @property
    def encrypted(self) -> bool:
        return self.document.secrets is not None


def parse(data: str | bytes) -> ParsedBackup:
    """The document in ``data``, or ``BackupRefused`` saying why not."""
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise BackupRefused(400, "backup_invalid_json", f"The backup is not valid JSON{where}: is it the whole "
                            "file, as it was written?") from None
    if not isinstance(raw, dict) or raw.get("format") != BACKUP_FORMAT:
        raise BackupRefused(422, "backup_invalid", "This is not a MirbadLLM backup (its 'format' is not "
                            f"'{BACKUP_FORMAT}').")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version != BACKUP_VERSION:
        raise BackupRefused(422, "backup_unknown_version", f"The backup's version is {version!r}; this daemon "
                            f"reads version {BACKUP_VERSION}. A newer MirbadLLM may read it.")
    try:
        document = BackupDocument.model_validate(raw)
    except ValidationError as exc:
        raise BackupRefused(422, "backup_invalid", f"The backup is damaged: {validation_message(exc)}") from None
    if document.secrets is not None:
        crypto.check_kdf(document.secrets.kdf)
    return ParsedBackup(document, plain_digest(raw))


def open_secrets(parsed: ParsedBackup, passphrase: str) -> BackupSecrets:
    """The decrypted secrets (blocking: the KDF), or ``BackupRefused``."""
    section = parsed.document.secrets
    if section is None:
        return BackupSecrets()
    plaintext = crypto.open_sealed(section, passphrase, parsed.document.format, parsed.document.version,
                                   parsed.digest)
    try:
        return BackupSecrets.model_validate_json(plaintext)
    except ValidationError:
        raise BackupRefused(422, "backup_invalid", "The backup's encrypted section opened but is not what a "
                            "MirbadLLM backup holds.") from None
