"""One rollout: the nodes upgraded strictly one at a time, the first failure stopping the rest.

For each node in order: read its status (version, platform) and the runtimes it runs (instance →
PID); push the build for its platform, or the release's Debian package to an agent the package
installed (its status lists ``upgrade-deb``: ``agent.api.upgrade.upgrade_platform``)
(``AgentClient.upgrade``: the agent checks size and SHA-256 before it installs anything, answers,
exits 75 and is started again by its service manager); then
poll until the node answers with the release's version and every runtime it ran before is ready
under the same PID (adopted, not restarted). Only then is the next node told. A refusal, an
unreachable node or a node not back ready within ``ready_timeout_s`` fails that node with the
reason, and the nodes after it stay pending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, Field

from agent.api.client import AgentError
from agent.api.models import AgentStatus, InstancesPage, InstanceState
from agent.api.upgrade import AgentUpgradeAnswer, AgentUpgradeOffer, upgrade_platform
from daemon.api.models import LOCAL_NODE
from daemon.api.nodes import NodeView
from daemon.api.upgrades import (
    NodeUpgradeState,
    NodeUpgradeView,
    RolloutState,
    RolloutView,
)
from daemon.nodes.links import Links
from daemon.upgrades.release import StagedRelease

_LOGGER = logging.getLogger(__name__)


class UpgradePolicy(BaseModel):
    """Agent rollouts (``[upgrades]`` in ``config.toml``)."""

    ready_timeout_s: float = Field(default=120.0, gt=0, description="How long an upgraded node has to come "
                                   "back with the new version and its runtimes adopted before the rollout stops.")
    poll_interval_s: float = Field(default=0.5, gt=0, description="Seconds between checks of a restarting node.")


class UpgradeClient(Protocol):
    """What a rollout needs of a node's ``AgentClient``."""

    async def status(self) -> AgentStatus: ...
    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage: ...
    async def upgrade(self, offer: AgentUpgradeOffer, build: Any) -> AgentUpgradeAnswer: ...


@dataclass(frozen=True)
class NodeTarget:
    node_id: str
    name: str
    client: UpgradeClient


def rollout_targets(nodes: list[NodeView], links: Links) -> list[NodeTarget]:
    """The paired nodes a rollout walks, in the order of ``/api/nodes`` (this machine's own agent is
    the daemon's child and goes with the daemon), each with its link's client."""
    targets = []
    for node in nodes:
        link = links.get(node.id)
        if node.id != LOCAL_NODE and link is not None:
            targets.append(NodeTarget(node.id, node.name, link.client))
    return targets


class NodeFailed(Exception):
    pass


class Rollout:
    events = "upgrade"  # the events' prefix: upgrade.started, upgrade.node, upgrade.finished

    def __init__(self, release: StagedRelease, targets: list[NodeTarget], policy: UpgradePolicy,
                 publish: Callable[..., Any]) -> None:
        self.release = release
        self.targets = targets
        self.policy = policy
        self.publish = publish
        self.view = RolloutView(state=RolloutState.RUNNING, version=release.version, started_at=time.time(),
                                nodes=[NodeUpgradeView(node=t.node_id, name=t.name) for t in targets])

    def _node(self, index: int, **update: Any) -> None:
        node = self.view.nodes[index].model_copy(update=update)
        nodes = list(self.view.nodes)
        nodes[index] = node
        self.view = self.view.model_copy(update={"nodes": nodes})
        self.publish(f"{self.events}.node", node=node.node, name=node.name, state=node.state.value,
                     version=self.release.version, reason=node.reason)

    async def run(self) -> RolloutView:
        self.publish(f"{self.events}.started", version=self.release.version, nodes=[t.node_id for t in self.targets])
        for index, target in enumerate(self.targets):
            try:
                await self._upgrade(index, target)
            except NodeFailed as exc:
                reason = str(exc)
                _LOGGER.warning("rollout of %s stopped at node %s: %s", self.release.version, target.name, reason)
                self._node(index, state=NodeUpgradeState.FAILED, reason=reason, finished_at=time.time())
                self._finish(RolloutState.FAILED, f"node {target.name}: {reason}; the nodes after it were not "
                                                  "upgraded")
                return self.view
        self._finish(RolloutState.DONE, None)
        return self.view

    def _finish(self, state: RolloutState, reason: str | None) -> None:
        self.view = self.view.model_copy(update={"state": state, "reason": reason, "finished_at": time.time()})
        self.publish(f"{self.events}.finished", version=self.release.version, state=state.value, reason=reason)

    async def _upgrade(self, index: int, target: NodeTarget) -> None:
        """Bring one node to the release, or raise ``NodeFailed`` (a subclass ships something else)."""
        client, version = target.client, self.release.version
        try:
            status = await client.status()
            before = _ready_pids(await client.instances())
        except AgentError as exc:
            raise NodeFailed(f"unreachable before the upgrade: {exc.message}") from exc
        platform = upgrade_platform(status.os, status.arch, status.features)
        self._node(index, state=NodeUpgradeState.UPGRADING, platform=platform, from_version=status.version,
                   started_at=time.time())
        if status.version == version:
            self._node(index, state=NodeUpgradeState.DONE, reason=f"already runs {version}", finished_at=time.time())
            return
        build = self.release.builds.get(platform or "")
        if build is None:
            what = ("Debian package (its agent was installed from the .deb and upgrades through it)"
                    if platform and platform.endswith("-deb") else "agent build")
            raise NodeFailed(f"the release {version} has no {what} for {status.os}/{status.arch}"
                             f"{f' ({platform})' if platform else ''}")
        offer = AgentUpgradeOffer(platform=build.artefact.platform, version=version, size=build.artefact.size,
                                  sha256=build.artefact.sha256)
        _LOGGER.info("upgrading node %s from %s to %s", target.name, status.version, version)
        try:
            await client.upgrade(offer, build.path)
        except AgentError as exc:
            raise NodeFailed(f"the agent refused the upgrade: {exc.message}") from exc
        await self._wait_back(target, before)
        self._node(index, state=NodeUpgradeState.DONE, reason=None, finished_at=time.time())
        _LOGGER.info("node %s runs %s, its %d runtime(s) adopted", target.name, version, len(before))

    async def _wait_back(self, target: NodeTarget, before: dict[str, int]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.policy.ready_timeout_s
        last = "no answer since it restarted"
        while True:
            try:
                status = await asyncio.wait_for(target.client.status(), self.policy.poll_interval_s * 4)
                if status.version != self.release.version:
                    last = f"it still reports version {status.version}"
                else:
                    missing = _missing(before, _ready_pids(await target.client.instances()))
                    if not missing:
                        return
                    last = f"its runtimes are not adopted yet: {', '.join(missing)}"
            except (AgentError, TimeoutError) as exc:
                last = f"no answer ({exc.message if isinstance(exc, AgentError) else 'timed out'})"
            if loop.time() >= deadline:
                raise NodeFailed(f"did not come back ready within {self.policy.ready_timeout_s:g} s: {last}")
            await asyncio.sleep(self.policy.poll_interval_s)


def _ready_pids(page: InstancesPage) -> dict[str, int]:
    return {i.instance_id: i.pid for i in page.instances if i.state == InstanceState.READY and i.pid is not None}


def _missing(before: dict[str, int], after: dict[str, int]) -> list[str]:
    return [f"{iid} (pid {pid})" for iid, pid in sorted(before.items()) if after.get(iid) != pid]
