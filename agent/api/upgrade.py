"""The wire contract of ``POST /agent/v1/upgrade``: the daemon pushes a new agent build to a node.

The request body is the artefact's bytes (``application/octet-stream``) over the daemon's mutual-TLS
connection; what they must be travels as query parameters (``AgentUpgradeOffer``): the feed's
platform key, version, exact size and SHA-256. The agent refuses anything else before it replaces
a byte, answers ``AgentUpgradeAnswer``, then exits with ``EXIT_RESTART`` (75) so its service
manager starts the new build, which adopts the runtimes still running.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: (platform.system(), platform.machine()) -> the release feed's platform key of the agent build.
_AGENT_PLATFORMS = {
    ("linux", "x86_64"): "agent-linux-x86_64",
    ("linux", "amd64"): "agent-linux-x86_64",
    ("linux", "aarch64"): "agent-linux-arm64",
    ("linux", "arm64"): "agent-linux-arm64",
    ("darwin", "arm64"): "agent-macos-arm64",
    ("windows", "amd64"): "agent-windows-x86_64",
    ("windows", "x86_64"): "agent-windows-x86_64",
}


#: In ``AgentStatus.features`` of an agent the Debian package installed (``--installed-by deb``): it
#: upgrades by installing the release's package (``linux-<arch>-deb``), not the single-file agent build.
DEB_UPGRADE_FEATURE = "upgrade-deb"


def agent_platform(os_name: str, machine: str) -> str | None:
    """The feed's platform key of the agent build for a node (``AgentStatus.os``/``arch``), or None."""
    return _AGENT_PLATFORMS.get((os_name.lower(), machine.lower()))


def deb_platform(machine: str) -> str:
    """The feed's platform key of the Debian package for a Linux machine (``linux-x86_64-deb``)."""
    arch = {"amd64": "x86_64", "aarch64": "arm64"}.get(machine.lower(), machine.lower())
    return f"linux-{arch}-deb"


def upgrade_platform(os_name: str, machine: str, features: list[str]) -> str | None:
    """What a node installs when upgraded: the Debian package for an agent the package installed,
    else the agent build for its OS and architecture (None: no build exists for it)."""
    if DEB_UPGRADE_FEATURE in features and os_name.lower() == "linux":
        return deb_platform(machine)
    return agent_platform(os_name, machine)


def is_node_artefact(platform: str) -> bool:
    """A feed artefact a node installs: an agent build, or the Debian package a .deb's agent takes."""
    return platform.startswith("agent-") or (platform.startswith("linux-") and platform.endswith("-deb"))


class AgentUpgradeOffer(BaseModel):
    """What the pushed bytes must be; sent as query parameters."""

    model_config = ConfigDict(frozen=True)

    platform: str = Field(min_length=1, max_length=64, pattern=r"^(agent-[a-z0-9_-]+|linux-[a-z0-9_]+-deb)$",
                          description="The feed's platform key, e.g. agent-linux-x86_64 (or linux-x86_64-deb "
                                      "for an agent the Debian package installed).")
    version: str = Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z.+!_-]+$",
                         description="The release's version; the restarted agent reports it.")
    size: int = Field(gt=0, description="Exact size in bytes, from the signed feed.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the artefact, from the signed feed.")


class AgentUpgradeAnswer(BaseModel):
    """The artefact was verified and swapped in; the agent restarts once this answer is sent."""

    status: str = "restarting"
    version: str
    previous_version: str
