"""Pydantic contracts of llama.cpp build rollouts (``/api/nodes/runtime-upgrade``): one node at a time.

The walk and its per-node states are the agent rollout's (``daemon.api.upgrades``); a runtime
rollout adds which build it ships and which build each node should run.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from daemon.api.upgrades import RolloutView


class NodeRuntimeBuild(BaseModel):
    """The llama.cpp build a node should run: the last one a rollout installed there."""

    build: str = Field(description="The build folder's name, llamacpp-<version>-<key>.")
    version: str
    digest: str = Field(description="Its fingerprint on that node (what a pin's digest prefix matches).")
    since: float


class RuntimeRolloutView(RolloutView):
    """``RolloutView`` (``version``: the build's version) plus the build and each node's wanted build."""

    build: str | None = Field(default=None, description="The build being rolled out, llamacpp-<version>-<key>.")
    wanted: dict[str, NodeRuntimeBuild] = Field(default_factory=dict, description="Node id -> the build it "
                                                "should run, kept across daemon restarts.")


class RuntimeUpgradeRequest(BaseModel):
    """Roll a llama.cpp build (the folder ``make runtime`` writes) out over every paired node."""

    folder: str | None = Field(default=None, max_length=4096, description="The build folder "
                               "(llamacpp-<version>-<key>/ with runtime.json); default: the newest build "
                               "`make runtime` wrote for this program.")
    smoke_model: str | None = Field(default=None, max_length=4096, description="A GGUF file present on every "
                                    "node for the one-token smoke test; default: per node, the file of the "
                                    "first llama.cpp model registered on it.")
