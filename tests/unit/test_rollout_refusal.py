"""A node that refuses the build stops the rollout there: the nodes after it are never told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.api.client import AgentError
from agent.api.models import AgentStatus, InstancesPage
from agent.api.upgrade import AgentUpgradeAnswer, AgentUpgradeOffer
from core.releases.feed import make_feed
from daemon.api.upgrades import NodeUpgradeState, RolloutState
from daemon.upgrades.release import StagedBuild, StagedRelease
from daemon.upgrades.rollout import NodeTarget, Rollout, UpgradePolicy


class FakeAgent:
    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.offers: list[AgentUpgradeOffer] = []

    async def status(self) -> AgentStatus:
        return AgentStatus(node_id="n", hostname="h", os="Linux", arch="x86_64", version="0.1.0", cpu_count=1,
                           memory_total=1, memory_available=1)

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        return InstancesPage(version=1, instances=[])

    async def upgrade(self, offer: AgentUpgradeOffer, build: Any) -> AgentUpgradeAnswer:
        self.offers.append(offer)
        if self.refuse:
            raise AgentError(422, "upgrade_refused", self.refuse)
        return AgentUpgradeAnswer(version=offer.version, previous_version="0.1.0")


async def test_a_refused_build_fails_that_node_and_leaves_the_rest_pending(tmp_path: Path) -> None:
    build = tmp_path / "agent"
    build.write_text("0.2.0\n")
    feed = make_feed("0.2.0", {"agent-linux-x86_64": build})
    release = StagedRelease(feed, {"agent-linux-x86_64": StagedBuild(feed.artefacts[0], build)})
    refusing = FakeAgent(refuse="checksum check failed: the build's SHA-256 is ab…; nothing was replaced")
    next_one = FakeAgent()
    events: list[tuple[str, dict[str, Any]]] = []
    rollout = Rollout(release, [NodeTarget("a", "alpha", refusing), NodeTarget("b", "beta", next_one)],
                      UpgradePolicy(ready_timeout_s=1), lambda type_, **data: events.append((type_, data)))

    view = await rollout.run()

    assert view.state == RolloutState.FAILED
    assert view.reason is not None and view.reason.startswith("node alpha: the agent refused the upgrade: checksum")
    assert [(n.name, n.state) for n in view.nodes] == [("alpha", NodeUpgradeState.FAILED),
                                                        ("beta", NodeUpgradeState.PENDING)]
    assert refusing.offers[0].sha256 == feed.artefacts[0].sha256 and next_one.offers == []
    assert events[-1] == ("upgrade.finished", {"version": "0.2.0", "state": "failed", "reason": view.reason})
