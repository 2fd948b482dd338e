"""Is each node there? A status probe every few seconds: online, degraded or offline, as events.

A probe is ``GET /agent/v1/status`` with a short deadline over the node's pooled mTLS session. One
missed probe (or a slow one, or a failing instance feed) makes a node *degraded*; ``offline_after``
misses in a row make it *offline*: its link drops the long-poll and the instances it last reported,
so its models read "stopped: node … is offline" and ``/v1`` answers 503 with that reason instead of
waiting on a dead connection. With the defaults a cut link is offline within
``offline_after × (interval_s + probe_timeout_s)`` = 3 × (2 + 2) = 12 s. When a probe answers again
the link resumes: the agent reports its instances, still running with the same PIDs, and the
models are back (adopted, never restarted).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from agent.api.client import AgentError
from agent.api.models import AgentStatus
from core.tasks import every
from daemon.api.models import LOCAL_NODE
from daemon.api.nodes import NodeState
from daemon.events import EventBus
from daemon.nodes.links import AgentLink, Links, NodeLink

_LOGGER = logging.getLogger(__name__)


class NodePolicy(BaseModel):
    """Discovery and monitoring of nodes (``[nodes]`` in ``config.toml``)."""

    discovery: bool = Field(default=True, description="Browse the LAN (mDNS) for agents waiting to be paired.")
    mdns_interfaces: list[str] = Field(default_factory=list,
                                       description="IPv4 addresses of the interfaces to browse on; empty: all.")
    interval_s: float = Field(default=2.0, gt=0, description="Seconds between status probes of a node.")
    probe_timeout_s: float = Field(default=2.0, gt=0, description="Deadline of one status probe.")
    offline_after: int = Field(default=3, ge=1, description="Missed probes in a row that make a node offline.")
    slow_ms: float = Field(default=1000.0, gt=0, description="A probe slower than this makes a node degraded.")

    @property
    def offline_within_s(self) -> float:
        return self.offline_after * (self.interval_s + self.probe_timeout_s)


@dataclass
class NodeHealth:
    state: NodeState = NodeState.UNKNOWN
    reason: str | None = None
    status: AgentStatus | None = None
    latency_ms: float | None = None
    misses: int = 0
    last_seen: float | None = None
    since: float = field(default_factory=time.time)


class NodeMonitor:
    def __init__(self, links: Links, policy: NodePolicy, events: EventBus) -> None:
        self.links = links
        self.policy = policy
        self.events = events
        self.health: dict[str, NodeHealth] = {}

    async def run(self) -> None:
        await every(lambda: self.policy.interval_s, self.check_all, "node monitor round")  # a bad round is logged

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(node_id, link) for node_id, link in ((link.node_id, link) for link in self.links)
                               if not self._booting(node_id, link)))

    @staticmethod
    def _booting(node_id: str, link: AgentLink) -> bool:
        """The local agent is a child the daemon just spawned: until its link has had a first answer
        it is starting, not missing, and a probe would only log a false "degraded"."""
        return node_id == LOCAL_NODE and not link.first_sync.is_set()

    async def check(self, node_id: str, link: AgentLink) -> NodeHealth:
        health = self.health.setdefault(node_id, NodeHealth())
        started = time.perf_counter()
        try:
            status = await asyncio.wait_for(link.client.status(), self.policy.probe_timeout_s)
        except (AgentError, TimeoutError, ValueError) as exc:  # ValueError: an answer that is no status
            reason = exc.message if isinstance(exc, AgentError) else str(exc)[:200] if isinstance(exc, ValueError) \
                else f"no answer to a status probe within {self.policy.probe_timeout_s:g} s"
            self._missed(node_id, link, health, reason)
        else:
            self._answered(link, health, status, (time.perf_counter() - started) * 1000)
        return health

    def _missed(self, node_id: str, link: AgentLink, health: NodeHealth, reason: str) -> None:
        health.misses += 1
        if health.misses >= self.policy.offline_after:
            state = NodeState.OFFLINE
            reason = f"{reason} ({health.misses} status probes missed)"
            if isinstance(link, NodeLink) and (link.online or link.running):
                link.mark_offline(reason)
        else:
            state = NodeState.DEGRADED
            reason = f"missed a status probe: {reason}"
        self._set(node_id, health, state, reason)

    def _answered(self, link: AgentLink, health: NodeHealth, status: AgentStatus, latency_ms: float) -> None:
        was_offline = health.state == NodeState.OFFLINE
        health.misses, health.status, health.latency_ms, health.last_seen = 0, status, latency_ms, time.time()
        if isinstance(link, NodeLink):
            link.start()  # no-op while its long-poll runs; after an outage it resumes it
        if was_offline:
            state, reason = NodeState.DEGRADED, "back: waiting for its instances"
        elif latency_ms > self.policy.slow_ms:
            state, reason = NodeState.DEGRADED, f"slow: a status probe took {latency_ms:.0f} ms"
        elif link.first_sync.is_set() and not link.online:
            state, reason = NodeState.DEGRADED, f"status answers but its instance feed fails: {link.last_error}"
        else:
            state, reason = NodeState.ONLINE, None
        self._set(link.node_id, health, state, reason)

    def _set(self, node_id: str, health: NodeHealth, state: NodeState, reason: str | None) -> None:
        if state == health.state:
            health.reason = reason
            return
        previous, health.state, health.reason, health.since = health.state, state, reason, time.time()
        log = _LOGGER.warning if state != NodeState.ONLINE else _LOGGER.info
        log("node %s is %s%s", node_id[:12], state.value, f": {reason}" if reason else "")
        self.events.publish("node.state", None, node=node_id, state=state.value, previous=previous.value,
                            reason=reason)

    def forget(self, node_id: str) -> None:
        self.health.pop(node_id, None)
