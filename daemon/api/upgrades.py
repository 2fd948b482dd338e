"""Pydantic contracts of agent rollouts (``/api/nodes/upgrade``): one node at a time, never two."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field


class NodeUpgradeState(str, Enum):
    PENDING = "pending"        # not told yet
    UPGRADING = "upgrading"    # its agent has the build, or is restarting with it
    DONE = "done"              # back, reporting the new version, its runtimes adopted
    FAILED = "failed"          # refused the build or did not come back ready; see reason


class RolloutState(str, Enum):
    IDLE = "idle"              # no rollout since the daemon started
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"          # stopped at the first node that failed; the rest stay pending


class NodeUpgradeView(BaseModel):
    node: str
    name: str
    platform: str | None = Field(default=None, description="The feed's platform key of its agent build.")
    from_version: str = ""
    state: NodeUpgradeState = NodeUpgradeState.PENDING
    reason: str | None = None
    started_at: float | None = None
    finished_at: float | None = None


class RolloutView(BaseModel):
    state: RolloutState = RolloutState.IDLE
    version: str | None = Field(default=None, description="The release being rolled out.")
    reason: str | None = Field(default=None, description="Why the rollout stopped, when it failed.")
    started_at: float | None = None
    finished_at: float | None = None
    nodes: list[NodeUpgradeView] = Field(default_factory=list, description="In rollout order.")


class UpgradeRequest(BaseModel):
    """Start a rollout of the agent release (staged, or from the signed feed) over every paired node."""

    folder: str | None = Field(default=None, max_length=4096, description="Where the release is staged "
                               "(feed.json, feed.json.sig, the agent builds); default {home}/agent-release.")
    feed_url: str | None = Field(default=None, max_length=2048, description="Fetch the release from this signed "
                                 "feed instead (the one the app updated from): its signature is checked, its version "
                                 "must be the daemon's own, and the agent builds the nodes need are downloaded against "
                                 "its sizes and SHA-256. Ignored when folder is given.")
