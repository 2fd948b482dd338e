"""Ed25519 signing of release files, and the check of a feed against the trusted release keys.

A private key file is PEM (PKCS#8, what ``keygen`` writes) or the raw 32-byte seed. A signature
file is the 64-byte signature in base64 (what ``sign`` writes) or raw. Public keys are the raw
32 bytes in base64, as ``RELEASE_PUBLIC_KEYS`` holds them.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

#: The release public keys this build trusts (base64 of the raw 32 bytes). The private halves
#: never enter the repository: the release owner makes one with ``python -m mirbadllm.updates
#: keygen`` on the signing machine and pastes its public key here (installers/README.md, "Signing a
#: release"). Two entries during a key rotation. A frozen build also trusts the key `make package`
#: signed it with (``bundled_release_keys``). None at all: this build cannot verify any feed, so
#: every check is refused at the signature step.
BUNDLED_KEYS_FILE = "release-keys.json"  # {"keys": [base64, ...]}, written by `make package`


def bundled_release_keys(folder: str | None = None) -> tuple[str, ...]:
    """The public keys ``make package`` put beside the frozen program: the key of the release key it
    signed that very build's feed and sums with (``MIRBADLLM_SIGNING_KEY``)."""
    base = folder or getattr(sys, "_MEIPASS", None)
    if not base:
        return ()
    try:
        keys = json.loads((Path(base) / BUNDLED_KEYS_FILE).read_text()).get("keys", [])
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(k for k in keys if isinstance(k, str))


RELEASE_PUBLIC_KEYS: tuple[str, ...] = () + bundled_release_keys()

SIGNATURE_SIZE = 64
SEED_SIZE = 32


class SigningKeyError(ValueError):
    """A key or signature file that cannot be read as Ed25519."""


def load_private_key(data: bytes) -> Ed25519PrivateKey:
    """A PEM Ed25519 private key, or the raw 32-byte seed."""
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"not a readable unencrypted PEM private key: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(f"the PEM key is {type(key).__name__}, not Ed25519")
        return key
    if len(data) == SEED_SIZE:
        return Ed25519PrivateKey.from_private_bytes(data)
    raise SigningKeyError(f"neither a PEM Ed25519 private key nor a raw {SEED_SIZE}-byte seed ({len(data)} bytes)")


def load_private_key_file(path: Path) -> Ed25519PrivateKey:
    try:
        return load_private_key(path.read_bytes())
    except SigningKeyError as exc:
        raise SigningKeyError(f"{path}: {exc}") from exc


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def sign_bytes(data: bytes, key_file: Path) -> bytes:
    """The detached signature of ``data``, base64 with a newline (the content of ``FILE.sig``)."""
    signature = load_private_key_file(key_file).sign(data)
    return base64.b64encode(signature) + b"\n"


def decode_signature(data: bytes) -> bytes:
    """The 64 signature bytes from a ``.sig`` file, raw or base64."""
    if len(data) == SIGNATURE_SIZE:
        return data
    try:
        raw = base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SigningKeyError("the signature file is neither base64 nor a raw 64-byte signature") from exc
    if len(raw) != SIGNATURE_SIZE:
        raise SigningKeyError(f"the signature is {len(raw)} bytes, an Ed25519 signature is {SIGNATURE_SIZE}")
    return raw


def _public_key(encoded: str) -> Ed25519PublicKey:
    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise SigningKeyError(f"trusted key {encoded!r} is not a base64 Ed25519 public key") from exc


def verify_feed_signature(data: bytes, signature: bytes, trusted_keys: Sequence[str]) -> str | None:
    """None when ``signature`` (a ``.sig`` file's bytes) is by one of ``trusted_keys``; else why not."""
    if not trusted_keys:
        return "this build trusts no release key, so no feed can be verified"
    try:
        raw = decode_signature(signature)
        keys = [_public_key(k) for k in trusted_keys]
    except SigningKeyError as exc:
        return str(exc)
    for key in keys:
        try:
            key.verify(raw, data)
        except InvalidSignature:
            continue
        return None
    return "the feed is not signed by a trusted MirbadLLM release key"
