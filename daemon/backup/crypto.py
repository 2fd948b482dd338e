"""The encrypted section of a backup: AES-256-GCM, its key derived from the passphrase.

Written with scrypt (n=2**17, r=8, p=1, a 16-byte salt); read with scrypt or PBKDF2-SHA256 at
600,000 iterations or more. Parameters below those minimums are refused before any key is derived
(a file cannot talk a restore into a weak derivation), and absurdly high ones too (a file cannot
make the daemon spend minutes or gigabytes).

The derivation gives 64 bytes: the AES key, and a key for ``check``, an HMAC of a constant. A check
that does not match means the passphrase is wrong (``backup_wrong_passphrase``); a check that
matches with a ciphertext that does not open means the file was altered (``backup_tampered``).
The associated data is the format, the version, the KDF parameters and a digest of the plain
sections: changing any of them after the fact fails the tag.

Key derivation takes about half a second and 128 MiB by design: callers run it in an executor.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from daemon.api.backup import (
    MIN_SALT_BYTES,
    PBKDF2_MIN_ITERATIONS,
    SCRYPT_MIN_N,
    SCRYPT_MIN_P,
    SCRYPT_MIN_R,
    EncryptedSection,
    KdfParams,
)
from daemon.backup.errors import BackupRefused

_LOGGER = logging.getLogger(__name__)

_CHECK_MESSAGE = b"mirbadllm-backup passphrase check"
# scrypt holds 128 * n * r bytes and works p times that: twice what a backup is written with, at most
# (2**20 with r=16 was 2 GiB a restore request could make the daemon allocate).
_SCRYPT_MAX_BYTES, _SCRYPT_MAX_P = 2 * 128 * SCRYPT_MIN_N * SCRYPT_MIN_R, 4
_PBKDF2_MAX_ITERATIONS = 10_000_000
MIN_PASSPHRASE = 8


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise BackupRefused(422, "backup_invalid", f"The backup's {what} is not base64.") from None


def canonical(value: Any) -> bytes:
    """The one byte form of JSON data that digests and associated data are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def new_kdf() -> KdfParams:
    return KdfParams(name="scrypt", salt=b64(os.urandom(16)), n=SCRYPT_MIN_N, r=SCRYPT_MIN_R, p=SCRYPT_MIN_P)


def check_kdf(kdf: KdfParams) -> None:
    """Refuse parameters weaker than the minimums (``backup_weak_kdf``) or past sane maximums."""
    salt = unb64(kdf.salt, "KDF salt")
    if len(salt) < MIN_SALT_BYTES:
        raise BackupRefused(422, "backup_weak_kdf", f"The backup's KDF salt is {len(salt)} bytes; at least "
                            f"{MIN_SALT_BYTES} are required. It was not written by MirbadLLM as it is.")
    if kdf.name == "scrypt":
        n, r, p = kdf.n or 0, kdf.r or 0, kdf.p or 0
        if n < SCRYPT_MIN_N or r < SCRYPT_MIN_R or p < SCRYPT_MIN_P or n & (n - 1):
            raise BackupRefused(422, "backup_weak_kdf", f"The backup asks for scrypt n={n}, r={r}, p={p}: weaker "
                                f"than the minimum n={SCRYPT_MIN_N}, r={SCRYPT_MIN_R}, p={SCRYPT_MIN_P}; "
                                "refused (someone may have weakened it to guess the passphrase faster).")
        if 128 * n * r > _SCRYPT_MAX_BYTES or p > _SCRYPT_MAX_P:
            raise BackupRefused(422, "backup_invalid", f"The backup asks for scrypt n={n}, r={r}, p={p}: more "
                                "than a restore will spend.")
        return
    iterations = kdf.iterations or 0
    if iterations < PBKDF2_MIN_ITERATIONS:
        raise BackupRefused(422, "backup_weak_kdf", f"The backup asks for PBKDF2 with {iterations} iterations; "
                            f"at least {PBKDF2_MIN_ITERATIONS} are required.")
    if iterations > _PBKDF2_MAX_ITERATIONS:
        raise BackupRefused(422, "backup_invalid", f"The backup asks for {iterations} PBKDF2 iterations: more "
                            "than a restore will spend.")


def _derive(passphrase: str, kdf: KdfParams) -> tuple[bytes, bytes]:
    check_kdf(kdf)
    salt, secret = unb64(kdf.salt, "KDF salt"), passphrase.encode("utf-8")
    if kdf.name == "scrypt":
        assert kdf.n is not None and kdf.r is not None and kdf.p is not None
        derived = Scrypt(salt=salt, length=64, n=kdf.n, r=kdf.r, p=kdf.p).derive(secret)
    else:
        assert kdf.iterations is not None
        derived = PBKDF2HMAC(hashes.SHA256(), length=64, salt=salt, iterations=kdf.iterations).derive(secret)
    return derived[:32], derived[32:]


def _check(check_key: bytes) -> bytes:
    return hmac.new(check_key, _CHECK_MESSAGE, hashlib.sha256).digest()


def associated_data(format_: str, version: int, kdf: KdfParams, plain_digest: str) -> bytes:
    return canonical({"format": format_, "version": version, "kdf": kdf.model_dump(), "plain_sha256": plain_digest})


def seal(plaintext: bytes, passphrase: str, format_: str, version: int, plain_digest: str,
         kdf: KdfParams | None = None) -> EncryptedSection:
    """Encrypt ``plaintext`` under ``passphrase``, bound to the header and the plain sections' digest."""
    if len(passphrase) < MIN_PASSPHRASE:
        raise BackupRefused(422, "passphrase_too_short", f"A backup passphrase has at least {MIN_PASSPHRASE} "
                            "characters.")
    kdf = kdf or new_kdf()
    key, check_key = _derive(passphrase, kdf)
    nonce = os.urandom(12)
    ciphertext = AESGCM(key).encrypt(nonce, plaintext, associated_data(format_, version, kdf, plain_digest))
    return EncryptedSection(kdf=kdf, check=b64(_check(check_key)), nonce=b64(nonce), ciphertext=b64(ciphertext))


def open_sealed(section: EncryptedSection, passphrase: str, format_: str, version: int, plain_digest: str) -> bytes:
    """The plaintext, or ``backup_wrong_passphrase`` / ``backup_tampered`` / ``backup_weak_kdf``."""
    key, check_key = _derive(passphrase, section.kdf)
    if not hmac.compare_digest(_check(check_key), unb64(section.check, "passphrase check")):
        raise BackupRefused(422, "backup_wrong_passphrase", "The passphrase does not open this backup's encrypted "
                            "section (or its key derivation header was changed). Nothing was restored.")
    nonce = unb64(section.nonce, "nonce")
    try:
        return AESGCM(key).decrypt(nonce, unb64(section.ciphertext, "ciphertext"),
                                   associated_data(format_, version, section.kdf, plain_digest))
    except (InvalidTag, ValueError):
        raise BackupRefused(422, "backup_tampered", "The passphrase is right but the backup was altered after it "
                            "was written (its encrypted section, version or plain sections no longer match). "
                            "Nothing was restored.") from None
