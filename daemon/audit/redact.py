"""Snapshots for the audit log, with every secret taken out before anything is stored.

A field whose name says it holds a secret (a token, key, password, passphrase, hash, digest or
private key) keeps its name but not its value, as does every value of a ``headers`` map (an OTLP
exporter's API key travels in one); a password in a URL (``https://user:pw@host``) is cut out; PEM
blocks (certificates) are left out as bulk.
Pydantic ``SecretStr`` values never show. Files an object only names (``api_key_file``) are never
read: the path is kept, its contents never reach the log.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

from daemon.api.audit import REDACTED

MAX_SNAPSHOT_CHARS = 64 * 1024
_SECRET_NAMES = {"key", "api_key", "secret", "token", "password", "passphrase", "hash", "digest",
                 "authorization", "code", "pairing_code", "private_key", "admin_token", "ca_key"}
_SECRET_SUFFIXES = ("_token", "_secret", "_password", "_passphrase", "_hash", "_digest", "_private_key",
                    "_key_pem")
_BULK_SUFFIXES = ("_pem",)
_HEADER_MAPS = {"headers", "http_headers"}
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*):[^/@\s]*@")


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_NAMES or lowered.endswith(_SECRET_SUFFIXES)


def _clean(value: Any) -> Any:
    if isinstance(value, (SecretStr, SecretBytes)):
        return REDACTED
    if isinstance(value, BaseModel):
        return _clean(value.model_dump(mode="json"))
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            if _is_secret(name):
                out[name] = REDACTED if item not in (None, "") else item
            elif name.lower() in _HEADER_MAPS and isinstance(item, dict):
                out[name] = {str(k): REDACTED for k in item}
            elif name.lower().endswith(_BULK_SUFFIXES) and isinstance(item, str) and item:
                out[name] = "[PEM omitted]"
            else:
                out[name] = _clean(item)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_clean(item) for item in value]
    if isinstance(value, str):
        return scrub(value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return str(value)


def scrub(text: str) -> str:
    """Free text (an entry's detail) with any URL's password cut out."""
    return _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text) if "@" in text else text


def snapshot(value: Any) -> Any:
    """``value`` (a pydantic model, a dict, a list or a scalar) as JSON-ready data without secrets."""
    return None if value is None else _clean(value)


def to_json(value: Any) -> str | None:
    """The stored form of a snapshot: JSON, at most ``MAX_SNAPSHOT_CHARS`` (a bigger one is noted, not cut)."""
    if value is None:
        return None
    text = json.dumps(snapshot(value), ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > MAX_SNAPSHOT_CHARS:
        return json.dumps({"omitted": f"snapshot of {len(text)} characters, over {MAX_SNAPSHOT_CHARS}"})
    return text
