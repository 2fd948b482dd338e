"""The demo daemon's audit log (``audit``), mixed into ``memory_daemon.DemoDaemon``: always empty.

The app reads it whenever the daemon announces a change; the Audit page's tests run the real daemon
(``tests/app/test_audit_page.py``), so nothing here records entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.api.audit import MAX_LIMIT, AuditPage
from daemon.api.client import DaemonError


class DemoAudit:
    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _record(self, name: str, *args: Any) -> None: ...

    async def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
                    action: str | None = None, subject: str | None = None, limit: int = 100,
                    before: int | None = None) -> AuditPage:
        self._record("audit", since, until, actor, action, subject, limit, before)
        if not 1 <= limit <= MAX_LIMIT:
            raise DaemonError(400, "invalid_parameter", f"'limit' must be between 1 and {MAX_LIMIT}")
        return AuditPage(entries=[], next_before=None)
