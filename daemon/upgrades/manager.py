"""``UpgradeManager``: at most one rollout at a time and its state (the handlers: ``daemon.upgrades.api``).

Every paired node takes part (this machine's own agent is the daemon's child and is upgraded with
the daemon), in the order of ``/api/nodes``. Events: ``upgrade.started``, ``upgrade.node``
(node, state, reason), ``upgrade.finished``. A release whose signature does not verify, or older
than this daemon or than any node's agent (a downgrade or a replayed feed), is refused
(``422 release_refused``, with the check that failed) before any node is told. The release is the
staged folder's (``release.py``), or the signed feed's the request names (``feed.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from agent.api.client import AgentError
from agent.api.upgrade import agent_platform, upgrade_platform
from core.releases.fetch import UpdateError
from core.releases.signing import RELEASE_PUBLIC_KEYS
from daemon.api.nodes import NodeView
from daemon.api.program import program_version
from daemon.api.upgrades import RolloutState, RolloutView, UpgradeRequest
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.history import History
from daemon.nodes.links import Links
from daemon.upgrades.feed import fetch_release
from daemon.upgrades.one_at_a_time import OneRolloutAtATime
from daemon.upgrades.release import StagedRelease, load_release_async
from daemon.upgrades.rollout import NodeTarget, Rollout, UpgradePolicy

_LOGGER = logging.getLogger(__name__)



class UpgradeManager(OneRolloutAtATime):
    def __init__(self, home: Path, policy: UpgradePolicy, nodes: Callable[[], list[NodeView]], links: Links,
                 events: EventBus, history: History, trusted_keys: Sequence[str] = RELEASE_PUBLIC_KEYS,
                 daemon_version: str | None = None) -> None:
        super().__init__(nodes, links, events)
        self._home = home
        self._policy = policy
        self._history = history
        self.trusted_keys = trusted_keys  # the release keys; tests hand in their own
        self.daemon_version = daemon_version or program_version()
        self.rollout: Rollout | None = None

    @property
    def default_folder(self) -> Path:
        return self._home / "agent-release"

    def view(self) -> RolloutView:
        return self.rollout.view if self.rollout is not None else RolloutView()

    async def start(self, request: UpgradeRequest) -> RolloutView:
        if self.running:
            raise DaemonProblem(409, "upgrade_running", f"A rollout of {self.view().version} is running; wait for it "
                                "to finish (GET /api/nodes/upgrade).")
        targets = self._targets("No paired node to upgrade: pair a node first.")
        try:
            release = await self._release(request, targets)
        except UpdateError as exc:
            raise DaemonProblem(422, "release_refused", exc.message) from None
        why = self._downgrade(release.version, targets)
        if why is not None:
            raise DaemonProblem(422, "release_refused", f"Version check failed: the release {release.version} is "
                                f"older than {why} (a downgrade or a replayed old feed); no node was told.")
        self.rollout = Rollout(release, targets, self._policy, self._publish)
        self._launch(self.rollout.run(), "agent-rollout")
        _LOGGER.info("rolling out agent %s to %d node(s)", release.version, len(targets))
        await self._history.audit("admin", "nodes.upgrade", "", f"agent {release.version}")
        return self.view()

    async def _release(self, request: UpgradeRequest, targets: list[NodeTarget]) -> StagedRelease:
        """The staged folder's release, or the signed feed's (when asked for, and no folder is)."""
        if request.feed_url and not request.folder:
            platforms = await self._platforms(targets)
            return await fetch_release(request.feed_url, self._home, {p for p in platforms if p},
                                       self.trusted_keys, self.daemon_version)
        folder = Path(request.folder).expanduser() if request.folder else self.default_folder
        return await load_release_async(folder, self.trusted_keys)

    async def _platforms(self, targets: list[NodeTarget]) -> set[str | None]:
        """What each node installs (its agent build, or the Debian package for a .deb's agent, as its
        status says); a node that does not answer now is taken by its recorded OS and architecture."""
        recorded = {n.id: n for n in self._nodes()}
        platforms: set[str | None] = set()
        for target in targets:
            try:
                status = await target.client.status()
                platforms.add(upgrade_platform(status.os, status.arch, status.features))
            except AgentError:
                node = recorded.get(target.node_id)
                platforms.add(agent_platform(node.os, node.arch) if node is not None else None)
        return platforms

    def _downgrade(self, version: str, targets: list[NodeTarget]) -> str | None:
        """What already runs a newer version than ``version`` (this daemon, or a node), or None."""
        names = {t.node_id for t in targets}
        running = [("this daemon", self.daemon_version)]
        running += [(f"node {n.name}", n.version) for n in self._nodes() if n.id in names and n.version]
        for who, theirs in running:
            if _older(version, theirs):
                return f"{who}, which runs {theirs}"
        return None

    async def close(self) -> None:
        await super().close()
        if self.rollout is not None and self.rollout.view.state == RolloutState.RUNNING:
            _LOGGER.warning("the daemon stopped during the rollout of %s", self.rollout.release.version)


def _older(version: str, than: str) -> bool:
    try:
        return Version(version) < Version(than)
    except InvalidVersion:
        return False  # an unreadable version is not taken for a newer one
