"""Every location under the daemon's home directory, in one place (tests point it at tmp_path)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.api.locations import ADMIN_TOKEN_FILE, DAEMON_INFO_FILE


@dataclass(frozen=True)
class DaemonPaths:
    home: Path

    @property
    def config(self) -> Path:
        return self.home / "config.toml"

    @property
    def models(self) -> Path:
        return self.home / "models.json"

    @property
    def keys(self) -> Path:
        return self.home / "keys.json"

    @property
    def admin_token(self) -> Path:
        return self.home / ADMIN_TOKEN_FILE

    @property
    def daemon_info(self) -> Path:
        return self.home / DAEMON_INFO_FILE

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def nodes(self) -> Path:
        return self.home / "nodes.json"

    @property
    def node_backends(self) -> Path:
        return self.home / "node_backends.json"

    @property
    def history(self) -> Path:
        return self.home / "history.sqlite"

    @property
    def conversations(self) -> Path:
        return self.home / "conversations.sqlite"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def local_agent_home(self) -> Path:
        return self.home / "agent"

    def ensure(self) -> None:
        for directory in (self.home, self.pki, self.logs, self.local_agent_home):
            directory.mkdir(parents=True, exist_ok=True)
        try:
            self.home.chmod(0o700)
        except OSError:  # not ours to change (a shared test dir): the files themselves are 0600
            pass
