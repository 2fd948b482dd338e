"""The demo daemon's audit log (``audit``), mixed into ``memory_daemon.DemoDaemon``.

Seeded: a day of typical entries (a model edit from the app, a key revoked from the ctl, a node
paired, a health restart by the system); bare: empty. The demo's own edits add entries as the
daemon would (``_note_audit``), recorded as the app.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from daemon.api.audit import (
    ACTOR_APP,
    ACTOR_CTL,
    ACTOR_SYSTEM,
    MAX_LIMIT,
    AuditEntry,
    AuditPage,
)
from daemon.api.client import DaemonError


def _seed(now: float) -> list[AuditEntry]:
    coder: dict[str, Any] = {"id": "qwen25-coder-7b", "served_name": "qwen2.5-coder-7b", "node": "local",
                             "tags": ["code"], "settings": {"ctx_size": 8192, "parallel": 2, "n_gpu_layers": 99}}
    edited = {**coder, "settings": {**coder["settings"], "ctx_size": 16384}, "tags": ["code", "chat"]}
    key: dict[str, Any] = {"id": "k0", "name": "old-laptop", "prefix": "sk-mirbad-19be",
                           "created_at": now - 86400 * 40, "limits": {"requests_per_minute": 60, "tokens_per_day": None}}
    node: dict[str, Any] = {"id": "3f0c9a7e55d2", "name": "mac-studio", "host": "192.168.1.20", "port": 8485,
                            "certificate_pem": "[PEM omitted]", "hostname": "mac-studio.local", "os": "darwin",
                            "version": "0.9.0"}
    rows: list[tuple[float, str, str, str, str, Any, Any]] = [
        (now - 86400 * 0.9, ACTOR_CTL, "node.pair", node["id"], "mac-studio at 192.168.1.20:8485", None, node),
        (now - 86400 * 0.5, ACTOR_CTL, "key.revoke", "k0", "", key, None),
        (now - 7200, ACTOR_SYSTEM, "model.crash_restart", "mistral-nemo-12b", "crash 1 in a row, restart in 2 s", None,
         None),
        (now - 3600, ACTOR_APP, "model.update", coder["id"], "", coder, edited),
        (now - 600, ACTOR_APP, "settings.update", "", "", {"lan_access": False, "require_api_keys": False,
                                                           "audit_retention_days": 90},
         {"lan_access": False, "require_api_keys": True, "audit_retention_days": 90}),
    ]
    return [AuditEntry(id=n + 1, ts=ts, actor=actor, action=action, subject=subject, detail=detail,
                       before=before, after=after)
            for n, (ts, actor, action, subject, detail, before, after) in enumerate(rows)]


class DemoAudit:
    live: bool

    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def audit_entries(self) -> list[AuditEntry]:
        """Oldest first, as recorded."""
        entries: list[AuditEntry] | None = self.__dict__.get("_demo_audit")
        if entries is None:
            entries = self.__dict__["_demo_audit"] = _seed(time.time()) if self.live else []
        return entries

    def _note_audit(self, action: str, subject: str = "", before: Any = None, after: Any = None,
                    actor: str = ACTOR_APP) -> None:
        def dump(value: Any) -> Any:
            return value.model_dump(mode="json") if hasattr(value, "model_dump") else value

        entries = self.audit_entries
        entries.append(AuditEntry(id=(entries[-1].id + 1) if entries else 1, ts=time.time(), actor=actor,
                                  action=action, subject=subject, before=dump(before), after=dump(after)))

    async def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
                    action: str | None = None, subject: str | None = None, limit: int = 100,
                    before: int | None = None) -> AuditPage:
        self._record("audit", since, until, actor, action, subject, limit, before)
        if not 1 <= limit <= MAX_LIMIT:
            raise DaemonError(400, "invalid_parameter", f"'limit' must be between 1 and {MAX_LIMIT}")
        found = [e for e in reversed(self.audit_entries)
                 if (since is None or e.ts >= since) and (until is None or e.ts <= until)
                 and (not actor or e.actor == actor) and (not subject or e.subject == subject)
                 and (not action or e.action == action or e.action.startswith(action + "."))
                 and (before is None or e.id < before)]
        page = found[:limit]
        return AuditPage(entries=page, next_before=page[-1].id if len(found) > limit else None)
