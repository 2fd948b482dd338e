"""Contracts of the audit log (``GET /api/audit``): who did what to which object, and how it changed.

An entry names its actor: ``app`` or ``ctl`` (the client says which in the ``X-MirbadLLM-Client``
header, set by ``DaemonClient(client_name=...)``), another client's own name, ``admin token`` (a call
with the admin token that names no client) or ``system`` (the daemon itself: scheduled and background
work such as health restarts and evictions). ``before`` and ``after`` are JSON snapshots of the
changed object with every secret already redacted by the daemon; ``changes`` turns them into the
fields that changed, which the ctl and the app show as ``field: old → new``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

CLIENT_HEADER = "X-MirbadLLM-Client"
ACTOR_APP = "app"
ACTOR_CTL = "ctl"
ACTOR_ADMIN_TOKEN = "admin token"  # the admin token, from a client that did not name itself
ACTOR_SYSTEM = "system"
REDACTED = "[redacted]"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class AuditEntry(BaseModel):
    id: int = Field(description="Increases with every entry; the cursor of ``before=``.")
    ts: float = Field(description="Unix time of the action.")
    actor: str = Field(description="app, ctl, another client's name, 'admin token' or 'system'.")
    action: str = Field(description="What was done, e.g. model.update, key.revoke, node.pair.")
    subject: str = Field(default="", description="The object it was done to (a model, key or node id).")
    detail: str = Field(default="", description="A short free-text note.")
    before: Any = Field(default=None, description="The object before the action (secrets redacted), or null.")
    after: Any = Field(default=None, description="The object after the action (secrets redacted), or null.")
    request_id: str | None = Field(default=None, description="The X-Request-Id of the API call, if any.")


class AuditPage(BaseModel):
    """Newest first. ``next_before`` is the ``before=`` of the next (older) page; null on the last."""

    entries: list[AuditEntry]
    next_before: int | None = None


class AuditChange(BaseModel):
    field: str = Field(description="Dotted path of the field, e.g. settings.ctx_size.")
    old: Any = None
    new: Any = None
    added: bool = False    # the field is only in ``after``
    removed: bool = False  # the field is only in ``before``


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def changes(before: Any, after: Any) -> list[AuditChange]:
    """The leaf fields that differ between two snapshots (nested objects by dotted path; a list is
    one value). A snapshot that is not an object counts as one field named ``value``."""
    old: dict[str, Any] = {}
    new: dict[str, Any] = {}
    if before is not None:
        _flatten(before, "" if isinstance(before, dict) else "value", old)
    if after is not None:
        _flatten(after, "" if isinstance(after, dict) else "value", new)
    out: list[AuditChange] = []
    for name in sorted(old.keys() | new.keys()):
        if name in old and name in new:
            if old[name] != new[name]:
                out.append(AuditChange(field=name, old=old[name], new=new[name]))
        elif name in new:
            out.append(AuditChange(field=name, new=new[name], added=True))
        else:
            out.append(AuditChange(field=name, old=old[name], removed=True))
    return out


def short(value: Any, width: int = 40) -> str:
    """One value on one line, cut to ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# The fields that name an object best, shown when it was created or removed.
_NAMING = ("name", "served_name", "runtime", "node", "address", "host", "port", "model_path", "prefix", "path")


def summary(entry: AuditEntry, width: int = 100) -> str:
    """What changed, on one line: ``field: old → new, …`` for an edit, the object's fields when it
    was created, removed or revoked, else the entry's detail."""
    if entry.before is not None and entry.after is not None:
        found = changes(entry.before, entry.after)
        text = ", ".join(f"{c.field}: {short(c.old, 24)} → {short(c.new, 24)}" for c in found) or "no change"
    elif entry.after is not None or entry.before is not None:
        snapshot = entry.after if entry.after is not None else entry.before
        sign = "+" if entry.after is not None else "-"
        if isinstance(snapshot, dict):
            named = [k for k in _NAMING if snapshot.get(k) not in (None, "", [], {})]
            named = named or [k for k, v in snapshot.items()
                              if k != "id" and not isinstance(v, (dict, list)) and v not in (None, "")]
            text = sign + " " + ", ".join(f"{k}={short(snapshot[k], 32)}" for k in named[:4])
        else:
            text = f"{sign} {short(snapshot)}"
    else:
        text = ""
    if entry.detail:
        text = f"{text} ({entry.detail})" if text else entry.detail
    return short(text, width)
