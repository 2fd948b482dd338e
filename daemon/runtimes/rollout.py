"""One llama.cpp build rollout: the agent rollout's walk, one node at a time, with a build per node.

For each node in order (``daemon.upgrades.rollout.Rollout``: the first failure stops the rest):
read its status and the llama.cpp it offers; refuse a node of another system or machine; push
the packed build (``AgentClient.runtime_build``: the agent checks size and SHA-256, unpacks it
beside its current build, checks every file against ``runtime.json``, smoke-tests one token and
only then prefers it; a failed smoke removes the new build there); then read its status again: it
must offer the build's fingerprint. Only then is the next node told. Events:
``runtime_upgrade.started``, ``runtime_upgrade.node``, ``runtime_upgrade.finished``.
"""

from __future__ import annotations

import logging
import platform as _platform
import time
from collections.abc import Callable
from typing import Any

from agent.api.client import AgentError
from agent.api.runtime_builds import (
    LlamaCppBuildAnswer,
    LlamaCppBuildOffer,
    describe_offer,
)
from agent.api.runtimes import RuntimeOffer, profile
from daemon.api.upgrades import NodeUpgradeState
from daemon.runtimes.build import StagedRuntimeBuild
from daemon.upgrades.rollout import NodeFailed, NodeTarget, Rollout, UpgradePolicy

_LOGGER = logging.getLogger(__name__)


def _machine(name: str) -> str:
    lowered = name.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}.get(lowered, lowered)


def _llamacpp(offers: list[RuntimeOffer]) -> RuntimeOffer:
    return next((o for o in offers if profile(o.runtime).gpu_backends),
                RuntimeOffer(runtime="llamacpp", available=False, reason="the agent reports no llama.cpp driver"))


class RuntimeRollout(Rollout):
    events = "runtime_upgrade"

    def __init__(self, build: StagedRuntimeBuild, targets: list[NodeTarget], publish: Callable[..., Any],
                 smoke_model: Callable[[str], str | None],
                 installed: Callable[[str, LlamaCppBuildAnswer], None]) -> None:
        super().__init__(build, targets, UpgradePolicy(), publish)  # type: ignore[arg-type]  # .version is all it reads
        self.build = build
        self.smoke_model = smoke_model  # node id -> a GGUF on it, or None
        self.installed = installed  # called once a node offers the new build

    async def _upgrade(self, index: int, target: NodeTarget) -> None:
        build, client = self.build, target.client
        try:
            status = await client.status()
        except AgentError as exc:
            raise NodeFailed(f"unreachable before the rollout: {exc.message}") from exc
        before = _llamacpp(status.runtime_offers)
        self._node(index, state=NodeUpgradeState.UPGRADING, platform=f"{status.os}/{_machine(status.arch)}",
                   from_version=describe_offer(before), started_at=time.time())
        if status.os != build.system or _machine(status.arch) != _machine(build.machine):
            raise NodeFailed(f"the build is for {build.system}/{build.machine}, this node runs "
                             f"{status.os}/{_machine(status.arch) or _platform.machine()}")
        if "runtime-builds" not in status.features:
            raise NodeFailed("its agent takes no llama.cpp builds (an older agent: upgrade it first, "
                             "POST /api/nodes/upgrade)")
        smoke = self.smoke_model(target.node_id)
        if not smoke:
            raise NodeFailed("no model file to smoke-test the build with on this node: name one (smoke_model) "
                             "or register a llama.cpp model there")
        offer = LlamaCppBuildOffer(name=build.name, version=build.version, size=build.size, sha256=build.sha256,
                                   smoke_model=smoke)
        _LOGGER.info("rolling llama.cpp %s out to node %s (it runs %s)", build.name, target.name,
                     describe_offer(before))
        try:
            answer = await client.runtime_build(offer, build.archive)  # type: ignore[attr-defined]
        except AgentError as exc:
            raise NodeFailed(f"the agent refused the build: {exc.message}") from exc
        try:
            after = _llamacpp((await client.status()).runtime_offers)
        except AgentError as exc:
            raise NodeFailed(f"no answer after the build was installed: {exc.message}") from exc
        if after.digest != answer.digest:
            raise NodeFailed(f"the agent installed {build.name} but offers {describe_offer(after)}")
        self.installed(target.node_id, answer)
        self._node(index, state=NodeUpgradeState.DONE, finished_at=time.time(),
                   reason=f"already ran {build.name}" if answer.already else None)
