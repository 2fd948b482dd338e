"""An agent the Debian package installed upgrades through the package manager, and only with the package.

The agent side runs the real ``AgentUpgrades`` with ``DebInstaller``; its one privileged step
(``systemctl start mirbadllm-agent-upgrade.service``) is a recorded seam. The daemon side runs the
real ``Rollout`` against in-process clients that answer like agents do: the .deb's agent lists
``upgrade-deb`` in its status and is sent the release's package, a file agent the agent build.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.api.models import AgentStatus, InstancesPage
from agent.api.upgrade import (
    DEB_UPGRADE_FEATURE,
    AgentUpgradeAnswer,
    AgentUpgradeOffer,
    upgrade_platform,
)
from agent.problems import AgentProblem
from agent.upgrade import (
    AgentUpgrades,
    DebInstaller,
    FileInstaller,
    UpgradeRefused,
    installer_for,
)
from core.releases.feed import ReleaseArtefact, ReleaseFeed
from daemon.api.upgrades import NodeUpgradeState, RolloutState
from daemon.upgrades.release import StagedBuild, StagedRelease
from daemon.upgrades.rollout import NodeTarget, Rollout, UpgradePolicy

AGENT_BUILD, DEB = "agent-linux-x86_64", "linux-x86_64-deb"
PACKAGE = b"!<arch>\n(the 0.2.0 package)\n"


def body(data: bytes) -> Callable[[], AsyncIterator[bytes]]:
    async def chunks() -> AsyncIterator[bytes]:
        yield data
    return chunks


def offer(platform: str, data: bytes = PACKAGE) -> AgentUpgradeOffer:
    return AgentUpgradeOffer(platform=platform, version="0.2.0", size=len(data),
                             sha256=hashlib.sha256(data).hexdigest())


class Systemctl:
    """Records what the agent ran and what the package file held when it ran."""

    def __init__(self, package: Path, code: int = 0, stderr: str = "") -> None:
        self.package, self.code, self.stderr = package, code, stderr
        self.calls: list[tuple[list[str], bytes | None]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        held = self.package.read_bytes() if self.package.is_file() else None
        self.calls.append((list(argv), held))
        return subprocess.CompletedProcess(list(argv), self.code, "", self.stderr)


def deb_agent(tmp_path: Path, code: int = 0, stderr: str = "") -> tuple[AgentUpgrades, Systemctl, list[str]]:
    folder = tmp_path / "upgrades"
    systemctl = Systemctl(folder / "mirbadllm-agent-upgrade.deb", code, stderr)
    restarted: list[str] = []
    installer = DebInstaller(folder / "mirbadllm-agent-upgrade.deb", machine="x86_64", run=systemctl)
    return (AgentUpgrades(folder, installer, "0.1.0", on_installed=lambda: restarted.append("75"),
                          this_platform=AGENT_BUILD), systemctl, restarted)


async def test_a_deb_agent_installs_the_verified_package_through_its_one_unit(tmp_path: Path) -> None:
    agent, systemctl, _ = deb_agent(tmp_path)
    answer = await agent.receive(offer(DEB), body(PACKAGE))
    assert (answer.version, answer.previous_version, answer.status) == ("0.2.0", "0.1.0", "restarting")
    # The package was in place, verified, when the unit started; the helper took its own copy.
    assert systemctl.calls == [(["systemctl", "start", "mirbadllm-agent-upgrade.service"], PACKAGE)]
    assert list((tmp_path / "upgrades").iterdir()) == []


async def test_a_deb_agent_refuses_a_package_that_is_not_the_one_offered_and_runs_nothing(tmp_path: Path) -> None:
    agent, systemctl, _ = deb_agent(tmp_path)
    with pytest.raises(UpgradeRefused, match="checksum check failed"):
        await agent.receive(offer(DEB), body(PACKAGE.replace(b"0.2.0", b"6.6.6")))
    with pytest.raises(UpgradeRefused, match="this node takes linux-x86_64-deb"):
        await agent.receive(offer(AGENT_BUILD), body(PACKAGE))  # the single-file build is not its program
    assert systemctl.calls == [] and list((tmp_path / "upgrades").iterdir()) == []


async def test_a_failed_install_is_reported_and_the_agent_does_not_restart(tmp_path: Path) -> None:
    agent, systemctl, restarted = deb_agent(tmp_path, code=1, stderr="Failed to start mirbadllm-agent-upgrade."
                                            "service: Interactive authentication required.\n")
    with pytest.raises(AgentProblem) as failed:
        await agent.receive(offer(DEB), body(PACKAGE))
    assert failed.value.code == "upgrade_failed" and failed.value.status == 500
    assert "Interactive authentication required" in failed.value.message
    assert "still runs the previous version" in failed.value.message
    assert len(systemctl.calls) == 1 and restarted == [] and list((tmp_path / "upgrades").iterdir()) == []


async def test_an_agent_not_installed_from_the_deb_refuses_the_package(tmp_path: Path) -> None:
    target = tmp_path / "mirbadllm-agent"
    target.write_text("0.1.0\n")
    agent = AgentUpgrades(tmp_path / "upgrades", FileInstaller(target), "0.1.0", this_platform=AGENT_BUILD)
    with pytest.raises(UpgradeRefused) as refused:
        await agent.receive(offer(DEB), body(PACKAGE))
    assert refused.value.message == ("upgrade refused: linux-x86_64-deb is the Debian package and this agent was not "
                                     "installed from it (it takes agent-linux-x86_64); nothing was replaced")
    assert target.read_text() == "0.1.0\n"


def test_how_the_agent_was_installed_picks_its_installer(tmp_path: Path) -> None:
    deb = installer_for(None, {}, installed_by="deb", folder=Path("/var/lib/mirbadllm-agent/upgrades"))
    assert isinstance(deb, DebInstaller) and deb.unsupported is None
    assert deb.package == Path("/var/lib/mirbadllm-agent/upgrades/mirbadllm-agent-upgrade.deb")
    elsewhere = installer_for(None, {}, installed_by="deb", folder=tmp_path / "upgrades")
    assert elsewhere.unsupported is not None and "installs only from /var/lib/mirbadllm-agent/upgrades" in \
        elsewhere.unsupported
    assert isinstance(installer_for(str(tmp_path / "build"), {}), FileInstaller)
    assert upgrade_platform("Linux", "x86_64", [DEB_UPGRADE_FEATURE]) == DEB
    assert upgrade_platform("Linux", "x86_64", []) == AGENT_BUILD
    assert upgrade_platform("Darwin", "arm64", [DEB_UPGRADE_FEATURE]) == "agent-macos-arm64"


class FakeNode:
    """Answers like an agent: its status (with or without ``upgrade-deb``), no runtimes, and after an
    upgrade the new version."""

    def __init__(self, features: list[str]) -> None:
        self.features = features
        self.version = "0.1.0"
        self.pushed: list[tuple[str, str]] = []

    async def status(self) -> AgentStatus:
        return AgentStatus(node_id="n", hostname="h", os="Linux", arch="x86_64", version=self.version,
                           cpu_count=1, memory_total=1, memory_available=1, features=self.features)

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        return InstancesPage(version=1, instances=[])

    async def upgrade(self, offer: AgentUpgradeOffer, build: Any) -> AgentUpgradeAnswer:
        self.pushed.append((offer.platform, Path(build).name))
        self.version = offer.version
        return AgentUpgradeAnswer(version=offer.version, previous_version="0.1.0")


def staged(tmp_path: Path, platforms: list[str]) -> StagedRelease:
    builds = {}
    for platform in platforms:
        path = tmp_path / f"{platform}.bin"
        path.write_bytes(platform.encode())
        builds[platform] = StagedBuild(ReleaseArtefact(platform=platform, url=path.name, size=path.stat().st_size,
                                                       sha256=hashlib.sha256(platform.encode()).hexdigest()), path)
    feed = ReleaseFeed(version="0.2.0", published="2026-12-01T09:00:00Z",  # type: ignore[arg-type]
                       artefacts=[b.artefact for b in builds.values()])
    return StagedRelease(feed, builds)


async def test_the_rollout_sends_the_package_to_a_deb_agent_and_the_build_to_a_file_agent(tmp_path: Path) -> None:
    deb, file = FakeNode([DEB_UPGRADE_FEATURE, "upgrade"]), FakeNode(["upgrade"])
    targets = [NodeTarget("a", "deb-node", deb), NodeTarget("b", "file-node", file)]
    rollout = Rollout(staged(tmp_path, [AGENT_BUILD, DEB]), targets, UpgradePolicy(poll_interval_s=0.01),
                      lambda *a, **k: None)
    view = await rollout.run()
    assert view.state == RolloutState.DONE
    assert deb.pushed == [(DEB, "linux-x86_64-deb.bin")] and file.pushed == [(AGENT_BUILD, "agent-linux-x86_64.bin")]
    assert [(n.name, n.platform, n.state) for n in view.nodes] == [
        ("deb-node", DEB, NodeUpgradeState.DONE), ("file-node", AGENT_BUILD, NodeUpgradeState.DONE)]


async def test_a_release_without_the_package_fails_the_deb_node_and_tells_no_other(tmp_path: Path) -> None:
    deb, file = FakeNode([DEB_UPGRADE_FEATURE]), FakeNode([])
    rollout = Rollout(staged(tmp_path, [AGENT_BUILD]), [NodeTarget("a", "deb-node", deb),
                                                         NodeTarget("b", "file-node", file)],
                      UpgradePolicy(poll_interval_s=0.01), lambda *a, **k: None)
    view = await rollout.run()
    assert view.state == RolloutState.FAILED and deb.pushed == [] and file.pushed == []
    assert view.nodes[0].reason == ("the release 0.2.0 has no Debian package (its agent was installed from the .deb "
                                    "and upgrades through it) for Linux/x86_64 (linux-x86_64-deb)")
    assert view.nodes[1].state == NodeUpgradeState.PENDING
