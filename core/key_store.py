"""Private keys at rest: encrypted with a secret held in the OS keychain, else 0600 files.

One implementation for the daemon (its CA key, its client key, the local agent's key it writes)
and every agent (its identity key). A key is written as encrypted PKCS#8 PEM (``BEGIN ENCRYPTED
PRIVATE KEY``) whose passphrase is a random 32-byte secret (hex) kept by ``keyring`` under the
service ``MirbadLLM`` and an account named after the key file (``key:<absolute path>``), so each
home and each identity has its own secret. Where no keychain can be used (``MIRBADLLM_KEYRING=off``,
keyring's fail or null backend, or the keychain refuses) the key is a plain PEM file readable by
its owner only (0600) and :func:`at_rest` says so in a warning.

A plain key found while a keychain is usable is encrypted in place (the secret is stored and read
back first, then the file is replaced atomically: at no moment is the key only in memory). An
encrypted key whose secret the keychain no longer holds raises :class:`KeyStoreError` naming what to
do: nothing here ever makes a new key in its place.

``MIRBADLLM_KEYRING`` (read in :func:`keychain` only): ``os`` (the default) uses keyring's backend
for this machine, ``off`` never touches a keychain (the tests' default, set in tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import ssl
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from pydantic import BaseModel, Field

from core.json_store import write_atomic

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

_LOGGER = logging.getLogger(__name__)

SERVICE = "MirbadLLM"
KEYRING_ENV = "MIRBADLLM_KEYRING"
ENCRYPTED_MARK = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"

_refusal: str | None = None  # why the keychain last refused to keep a secret, for at_rest()


class KeyStoreError(Exception):
    """A key at rest cannot be read; the message names the file and what to do."""


class KeysAtRest(BaseModel):
    """How this process's private keys are stored (a part of /api/status and the agent's status)."""

    keychain: bool = Field(description="True when every key is encrypted with a secret in the OS keychain.")
    backend: str | None = Field(default=None, description="The keychain in use (keyring's backend), if any.")
    plain_files: list[str] = Field(default_factory=list, description="Names of the key files stored unencrypted "
                                   "(0600).")
    warning: str | None = Field(default=None, description="Set when some key is a plain 0600 file, with why.")


def account(path: Path) -> str:
    """The keychain account (user name) of the secret that encrypts ``path``."""
    return f"key:{path.resolve()}"


def keychain() -> tuple[KeyringBackend | None, str]:
    """The usable keychain and its name, or None and why there is none."""
    mode = (os.environ.get(KEYRING_ENV) or "os").strip().lower()
    if mode == "off":
        return None, f"{KEYRING_ENV}=off"
    if mode != "os":
        return None, f"{KEYRING_ENV}={mode!r} is neither 'os' nor 'off'"
    try:
        import keyring
        from keyring.backends import chainer, fail, null

        backend = keyring.get_keyring()
    except Exception as exc:  # noqa: BLE001 - a broken keyring install or config is "no keychain"
        return None, f"the OS keychain could not be opened ({type(exc).__name__}: {exc})"
    name = f"{type(backend).__module__}.{type(backend).__name__}"
    empty_chain = isinstance(backend, chainer.ChainerBackend) and not backend.backends
    if isinstance(backend, fail.Keyring | null.Keyring) or empty_chain:
        return None, ("this system runs no keychain for this user (on Linux: GNOME Keyring or KWallet, "
                      "through the Secret Service)")
    return backend, name


def is_encrypted(data: bytes) -> bool:
    return ENCRYPTED_MARK in data


def _write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only, atomically (the old one stays until the new is whole),
    through a new temp file of its own: a fixed ``<name>.tmp`` left there kept its own mode (0644
    made the key readable by all) or, a link, led the key elsewhere."""
    write_atomic(path, data, 0o600)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer per key file across processes (the daemon and its local agent share one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _missing(path: Path) -> str:
    return (f"{path} is encrypted with a secret kept in the OS keychain (service {SERVICE!r}, account "
            f"{account(path)!r}), and the keychain no longer holds it. Restore that keychain entry (or the "
            f"keychain itself), or restore the home from a backup; only if neither is possible move {path.name} "
            "away: a new key means a new identity (a new CA: every node pairs again; a new agent key: pair the "
            "agent again).")


def _secret(path: Path) -> str:
    """The existing secret for ``path``; KeyStoreError when it cannot be had."""
    backend, reason = keychain()
    if backend is None:
        raise KeyStoreError(f"{path} is encrypted with a secret kept in the OS keychain, but {reason}: start "
                            f"where that keychain is reachable (unset {KEYRING_ENV}, unlock the keychain).")
    try:
        secret = backend.get_password(SERVICE, account(path))
    except Exception as exc:  # locked, denied, bus down: all say "cannot read it now"
        raise KeyStoreError(f"the OS keychain refused the secret of {path} ({type(exc).__name__}: {exc}); "
                            "unlock the keychain and start again") from exc
    if not secret:
        raise KeyStoreError(_missing(path))
    return secret


def _new_or_existing_secret(path: Path) -> str | None:
    """A secret for writing ``path`` (the one already kept, else a new one stored and read back);
    None where no keychain can keep one."""
    global _refusal
    backend, _reason = keychain()
    if backend is None:
        return None
    user = account(path)
    try:
        existing = backend.get_password(SERVICE, user)
        if existing:
            return existing
        made = secrets.token_hex(32)
        backend.set_password(SERVICE, user, made)
        if backend.get_password(SERVICE, user) != made:
            raise KeyStoreError("it did not keep the secret it was given")
    except Exception as exc:  # noqa: BLE001 - any refusal: the key stays a 0600 file
        _refusal = f"the OS keychain refused to keep a secret ({type(exc).__name__}: {exc})"
        _LOGGER.warning("%s: %s stays an unencrypted file readable by its owner only", _refusal, path.name)
        return None
    return made


def _encoded(key: PrivateKeyTypes, secret: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(secret.encode("ascii")) if secret else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def write_key(path: Path, key: PrivateKeyTypes) -> bool:
    """Store ``key`` at ``path``: encrypted when a keychain keeps its secret (True), else a 0600 file."""
    with _locked(path):
        secret = _new_or_existing_secret(path)
        _write_private(path, _encoded(key, secret))
    return secret is not None


def _decode(path: Path, data: bytes, secret: str | None) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(data, password=secret.encode("ascii") if secret else None)
    except (ValueError, TypeError) as exc:
        if secret:
            raise KeyStoreError(f"{path} does not open with the secret the OS keychain holds for it (service "
                                f"{SERVICE!r}, account {account(path)!r}): the entry was replaced. Restore it, "
                                "or restore the home from a backup.") from exc
        raise KeyStoreError(f"{path} is not a PEM private key ({exc})") from exc


def read_key(path: Path) -> PrivateKeyTypes:
    """Load the key at ``path``; a plain one is encrypted in place when a keychain is usable."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyStoreError(f"{path} cannot be read ({exc})") from exc
    if is_encrypted(data):
        return _decode(path, data, _secret(path))
    key = _decode(path, data, None)
    if keychain()[0] is not None:
        with _locked(path):
            data = path.read_bytes()  # another process may have encrypted it meanwhile
            if is_encrypted(data):
                return _decode(path, data, _secret(path))
            secret = _new_or_existing_secret(path)
            if secret is not None:
                _write_private(path, _encoded(key, secret))
                _LOGGER.info("encrypted %s with a secret kept in the OS keychain", path)
    else:
        with contextlib.suppress(OSError):
            path.chmod(0o600)
    return key


def read_key_pem(path: Path) -> bytes:
    """The key at ``path`` as unencrypted PKCS#8 PEM (for a backup that encrypts it itself)."""
    return _encoded(read_key(path), None)


def forget(path: Path) -> None:
    """Remove the key file, then its keychain secret (best effort: a keychain may be gone)."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".lock").unlink(missing_ok=True)
    backend, _reason = keychain()
    if backend is None:
        return
    try:
        if backend.get_password(SERVICE, account(path)) is not None:
            backend.delete_password(SERVICE, account(path))
    except Exception as exc:  # noqa: BLE001 - a stale entry is harmless, a failed unpair is not
        _LOGGER.warning("the keychain secret of %s was not removed: %s", path.name, exc)


def load_cert_chain(ctx: ssl.SSLContext, certfile: Path | str, keyfile: Path | str) -> None:
    """``ctx.load_cert_chain`` for a key stored here: the keychain secret is the passphrase.

    Always passes a password callback, so OpenSSL never prompts on a terminal for an encrypted key.
    """
    key = Path(keyfile)
    ctx.load_cert_chain(certfile=str(certfile), keyfile=str(key), password=lambda: _secret(key))


def at_rest(keys: Iterable[Path]) -> KeysAtRest:
    """How the existing ones of ``keys`` are stored, with a warning when some are plain files."""
    backend, reason = keychain()
    plain: list[str] = []
    for path in keys:
        try:
            if not is_encrypted(path.read_bytes()):
                plain.append(path.name)  # a name, not a path: status answers carry no home paths
        except OSError:
            continue  # not made (yet): nothing at rest
    name = reason if backend is not None else None
    if backend is not None and not plain:
        return KeysAtRest(keychain=True, backend=name)
    why = reason if backend is None else (_refusal or "the OS keychain was not usable when they were written; "
                                          "they are encrypted at the next start if it is usable then")
    names = ", ".join(plain) or "none written yet"
    return KeysAtRest(keychain=False, backend=name, plain_files=plain,
                      warning=f"Private keys ({names}) are stored unencrypted, as files readable only by this "
                              f"user (0600): {why}.")
