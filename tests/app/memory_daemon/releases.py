"""The demo's agent rollout (``upgrade_status``, ``start_upgrade``), mixed into ``memory_daemon.DemoDaemon``.

As the daemon does it: the paired nodes (never this machine's, which goes with the daemon) brought
onto the daemon's own version one at a time, each step an ``upgrade.node`` event, a node that
already runs it marked done at once; no paired node is a ``409 no_nodes``. ``daemon_version`` is
what the demo daemon reports (a test restarting it onto a new version sets it). ``rollout_step_s`` is
the pause between steps (the demo's progress is visible; tests set 0). ``release_refusal`` makes the
next rollouts refused as the daemon refuses a forged or older release (``422 release_refused``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.upgrades import (
    NodeUpgradeState,
    NodeUpgradeView,
    RolloutState,
    RolloutView,
)

if TYPE_CHECKING:
    from daemon.api.nodes import NodeView

_LOGGER = logging.getLogger(__name__)


class DemoReleases:
    daemon_version = "0.1.0"
    rollout_step_s = 0.4
    release_refusal: str | None = None  # e.g. "Version check failed: ..."
    _demo_rollout: RolloutView | None = None
    _rollout_task: asyncio.Task[None] | None = None

    if TYPE_CHECKING:
        nodes: list[NodeView]

        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    async def upgrade_status(self) -> RolloutView:
        self._record("upgrade_status")
        return self._demo_rollout or RolloutView()

    async def start_upgrade(self, folder: str | None = None, feed_url: str | None = None) -> RolloutView:
        self._record("start_upgrade", folder, feed_url)
        if self._demo_rollout is not None and self._demo_rollout.state == RolloutState.RUNNING:
            raise DaemonError(409, "upgrade_running", f"A rollout of {self._demo_rollout.version} is running; wait "
                              "for it to finish (GET /api/nodes/upgrade).")
        targets = [n for n in self.nodes if not n.local]
        if not targets:
            raise DaemonError(409, "no_nodes", "No paired node to upgrade: pair a node first.")
        if self.release_refusal:
            raise DaemonError(422, "release_refused", self.release_refusal)
        version = self.daemon_version
        self._demo_rollout = RolloutView(state=RolloutState.RUNNING, version=version, started_at=time.time(),
                                         nodes=[NodeUpgradeView(node=n.id, name=n.name) for n in targets])
        self._publish("upgrade.started", version=version, nodes=[n.id for n in targets])
        self._rollout_task = asyncio.ensure_future(self._walk(version))
        return self._demo_rollout

    def _step(self, index: int, **update: Any) -> None:
        assert self._demo_rollout is not None
        nodes = list(self._demo_rollout.nodes)
        nodes[index] = step = nodes[index].model_copy(update=update)
        self._demo_rollout = self._demo_rollout.model_copy(update={"nodes": nodes})
        self._publish("upgrade.node", node=step.node, name=step.name, state=step.state.value,
                      version=self._demo_rollout.version, reason=step.reason)

    async def _walk(self, version: str) -> None:
        assert self._demo_rollout is not None
        for index, step in enumerate(self._demo_rollout.nodes):
            node = next((n for n in self.nodes if n.id == step.node), None)
            if node is None:
                continue
            self._step(index, state=NodeUpgradeState.UPGRADING, from_version=node.version, started_at=time.time())
            if node.version == version:
                self._step(index, state=NodeUpgradeState.DONE, reason=f"already runs {version}",
                           finished_at=time.time())
                continue
            await asyncio.sleep(self.rollout_step_s)
            self.nodes[self.nodes.index(node)] = node.model_copy(update={"version": version})
            self._step(index, state=NodeUpgradeState.DONE, finished_at=time.time())
        self._demo_rollout = self._demo_rollout.model_copy(update={"state": RolloutState.DONE,
                                                                   "finished_at": time.time()})
        self._publish("upgrade.finished", version=version, state="done", reason=None)
