"""``BackupRefused``: why a backup is not taken (each reason its own code), answered as a 4xx."""

from __future__ import annotations

from daemon.errors import DaemonProblem


class BackupRefused(DaemonProblem):
    """A backup file that cannot be restored: bad JSON, an unknown version, weakened KDF parameters,
    a wrong passphrase, altered bytes. Raised before anything changes."""
