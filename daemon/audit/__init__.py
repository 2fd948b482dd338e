"""The audit log: every admin action with who did it, to what, and the object before and after.

``daemon.audit.log.AuditLog`` stores and reads it (the ``audit`` table of ``history.sqlite``),
``daemon.audit.actor`` knows who is acting (the request's client, else the daemon itself),
``daemon.audit.redact`` takes secrets out of a snapshot, ``daemon.audit.api`` answers ``GET /api/audit``.
Contracts: ``daemon.api.audit``.
"""
