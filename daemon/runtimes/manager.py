"""``RuntimeUpgradeManager``: at most one llama.cpp build rollout at a time, and the build each node should run.

Every paired node takes part, in the order of ``/api/nodes`` (this machine's own agent runs the
build ``make runtime`` or the installer put beside the program). What each node should run is
kept in ``{home}/runtime-builds.json`` (node id -> build, version, fingerprint), written as each
node finishes. Audit: ``nodes.runtime_upgrade``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from agent.api.runtime_builds import LlamaCppBuildAnswer
from core.json_store import write_json_atomic
from daemon.api.nodes import NodeView
from daemon.api.runtime_upgrades import (
    NodeRuntimeBuild,
    RuntimeRolloutView,
    RuntimeUpgradeRequest,
)
from daemon.api.upgrades import NodeUpgradeState
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.history import History
from daemon.nodes.links import Links
from daemon.runtimes.build import (
    BuildRefused,
    StagedRuntimeBuild,
    default_builds_root,
    load_build,
    newest_build,
)
from daemon.runtimes.rollout import RuntimeRollout
from daemon.upgrades.one_at_a_time import OneRolloutAtATime
from daemon.upgrades.rollout import NodeTarget

_LOGGER = logging.getLogger(__name__)


class RuntimeUpgradeManager(OneRolloutAtATime):
    def __init__(self, home: Path, nodes: Callable[[], list[NodeView]], links: Links, events: EventBus,
                 history: History, smoke_models: Callable[[str], str | None],
                 builds_root: Path | None = None) -> None:
        super().__init__(nodes, links, events)
        self._home = home
        self._history = history
        self._smoke_models = smoke_models  # node id -> a llama.cpp model file registered there
        self.builds_root = builds_root or default_builds_root()
        self.rollout: RuntimeRollout | None = None
        self._wanted = self._load()

    @property
    def state_file(self) -> Path:
        return self._home / "runtime-builds.json"

    def _load(self) -> dict[str, NodeRuntimeBuild]:
        try:
            raw = json.loads(self.state_file.read_text())
            return {k: NodeRuntimeBuild.model_validate(v) for k, v in dict(raw).items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError) as exc:
            _LOGGER.warning("ignoring unreadable %s: %s", self.state_file, exc)
            return {}

    def _save(self) -> None:
        write_json_atomic(self.state_file, {k: v.model_dump(mode="json") for k, v in self._wanted.items()},
                          mode=0o644)

    def view(self) -> RuntimeRolloutView:
        base = self.rollout.view.model_dump() if self.rollout is not None else {}
        return RuntimeRolloutView(**base, build=self.rollout.build.name if self.rollout is not None else None,
                                  wanted=dict(self._wanted))

    async def start(self, request: RuntimeUpgradeRequest) -> RuntimeRolloutView:
        if self.running:
            raise DaemonProblem(409, "runtime_upgrade_running", f"A rollout of {self.view().build} is running; wait "
                                "for it to finish (GET /api/nodes/runtime-upgrade).")
        targets = self._targets("No paired node to roll a llama.cpp build out to: pair a node first.")
        folder = Path(request.folder).expanduser() if request.folder else newest_build(self.builds_root)
        if folder is None:
            raise DaemonProblem(422, "runtime_build_refused", f"No llama.cpp build in {self.builds_root}: build one "
                                "with `make runtime`, or name its folder (folder).")
        try:
            build = await asyncio.to_thread(load_build, folder, self._home / "runtime-release")
        except BuildRefused as exc:
            raise DaemonProblem(422, "runtime_build_refused", str(exc)) from None

        def smoke(node_id: str) -> str | None:
            return request.smoke_model or self._smoke_models(node_id)

        self.rollout = RuntimeRollout(build, targets, self._publish, smoke, self._installed)
        self._launch(self.rollout.run(), "runtime-rollout")
        _LOGGER.info("rolling llama.cpp %s out to %d node(s)", build.name, len(targets))
        await self._history.audit("admin", "nodes.runtime_upgrade", "", f"llama.cpp {build.name}")
        return self.view()

    async def install_on(self, build: StagedRuntimeBuild, node_id: str) -> None:
        """Install ``build`` on one node, this machine's own agent included (a GPU runtime pack,
        ``daemon.runtimes.packs``), by the same walk as a rollout: checked, pushed, smoke-tested,
        offered. Raises ``DaemonProblem`` (409 while a rollout runs or the node is not linked; 422
        with the node's reason when it refused or failed)."""
        if self.running:
            raise DaemonProblem(409, "runtime_upgrade_running", f"A rollout of {self.view().build} is running")
        link = self._links.get(node_id)
        view = next((n for n in self._nodes() if n.id == node_id), None)
        if link is None or view is None:
            raise DaemonProblem(409, "node_offline", f"node {node_id} is not linked to this daemon")
        self.rollout = RuntimeRollout(build, [NodeTarget(node_id, view.name, link.client)], self._publish,
                                      self._smoke_models, self._installed)
        task = self._launch(self.rollout.run(), f"runtime-pack-{node_id}")
        await self._history.audit("admin", "nodes.runtime_upgrade", node_id, f"llama.cpp {build.name} (runtime pack)")
        outcome = await asyncio.shield(task)
        if outcome.nodes and outcome.nodes[0].state != NodeUpgradeState.DONE:
            raise DaemonProblem(422, "runtime_build_refused", outcome.reason or "the node did not take the build")

    def _installed(self, node_id: str, answer: LlamaCppBuildAnswer) -> None:
        self._wanted[node_id] = NodeRuntimeBuild(build=answer.name, version=answer.version, digest=answer.digest,
                                                 since=time.time())
        try:
            self._save()
        except OSError as exc:
            _LOGGER.warning("cannot write %s: %s", self.state_file, exc)
