"""The demo daemon's audit log (``audit``), mixed into ``memory_daemon.DemoDaemon``.

Empty at first; the fake's own edits add entries as the daemon would (``_note_audit``, recorded
as the app; a test may note others).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from daemon.api.audit import (
    ACTOR_APP,
    MAX_LIMIT,
    AuditEntry,
    AuditPage,
)
from daemon.api.client import DaemonError


class DemoAudit:
    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def audit_entries(self) -> list[AuditEntry]:
        """Oldest first, as recorded."""
        entries: list[AuditEntry] | None = self.__dict__.get("_demo_audit")
        if entries is None:
            entries = self.__dict__["_demo_audit"] = []
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
