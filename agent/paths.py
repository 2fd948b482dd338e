"""Every location under an agent's home directory, returned by one object.

Tests point ``AgentPaths`` at ``tmp_path``; nothing else in ``agent/`` builds a path by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent.api.models import IDENTITY_CA_FILE, IDENTITY_CERT_FILE, IDENTITY_KEY_FILE

HOME_ENV = "MIRBADLLM_HOME"


def default_home() -> Path:
    """``$MIRBADLLM_HOME/agent``, else the platform's user data directory + ``/agent``."""
    base = os.environ.get(HOME_ENV)
    if base:
        return Path(base).expanduser() / "agent"
    import platformdirs  # imported late: only the CLI needs it

    return Path(platformdirs.user_data_dir("mirbadllm", appauthor=False)) / "agent"


@dataclass(frozen=True)
class AgentPaths:
    """The agent's data directory layout: ``identity/``, ``processes.json``, ``logs/``, ``models/``."""

    home: Path

    @property
    def identity_dir(self) -> Path:
        return self.home / "identity"

    @property
    def key_file(self) -> Path:
        return self.identity_dir / IDENTITY_KEY_FILE

    @property
    def cert_file(self) -> Path:
        return self.identity_dir / IDENTITY_CERT_FILE

    @property
    def ca_file(self) -> Path:
        return self.identity_dir / IDENTITY_CA_FILE

    @property
    def records_file(self) -> Path:
        return self.home / "processes.json"

    @property
    def runtime_checks_file(self) -> Path:
        """Which runtime builds were seen to generate here, or to stop on SIGILL (by hash)."""
        return self.home / "runtime-checks.json"

    @property
    def runtime_builds_dir(self) -> Path:
        """The llama.cpp builds the daemon rolled out here, side by side, and ``preferred.json``."""
        return self.home / "runtimes"

    @property
    def pairing_code_file(self) -> Path:
        """The code an unpaired agent shows, for ``mirbadllm agent pairing-code`` (0600)."""
        return self.home / "pairing-code.json"

    @property
    def services_policy_file(self) -> Path:
        """Which host services the daemon may manage here (``agent.services.policy``)."""
        return self.home / "services.json"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    def instance_log(self, instance_id: str) -> Path:
        """The log file a runtime instance writes its stdout and stderr to."""
        return self.logs_dir / f"{instance_id}.log"

    def ensure(self) -> AgentPaths:
        """Create the directories (identity/ readable by the owner only) and return self."""
        for directory in (self.home, self.logs_dir, self.models_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.identity_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self
