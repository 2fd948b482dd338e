"""Links to agents: one per node, each an instance cache kept fresh by long-polling.

``AgentLink`` is the daemon's view of one node's agent (the local agent's and every paired node's);
``NodeLink`` is a paired node's, which the node monitor takes offline and brings back. ``Links`` is
the one owner of which nodes are linked now: the orchestrator, the router, telemetry, jobs, sources
and upgrades are handed it and look a node up by id; only the composition root (the local agent)
and the node manager (pairing, removal) add or drop links.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

from agent.api.client import AgentClient, AgentError
from agent.api.models import InstanceInfo, TelemetrySample
from core.tasks import cancel_and_wait
from daemon.errors import DaemonProblem

_LOGGER = logging.getLogger(__name__)

LONG_POLL_S = 20.0
RETRY_MAX_S = 5.0  # the longest wait between attempts to reach an agent (doubling from 0.2 s)


class AgentLink:
    """One node's agent: its client and the latest instances it reported."""

    def __init__(self, node_id: str, client: AgentClient,
                 on_change: Callable[[str, dict[str, InstanceInfo]], None], retry_max_s: float = RETRY_MAX_S) -> None:
        self.node_id = node_id
        self.retry_max_s = retry_max_s
        self.client = client
        self.instances: dict[str, InstanceInfo] = {}
        self.latest_sample: TelemetrySample | None = None
        self.online = False
        self.last_error: str | None = None
        self._version: int | None = None
        self._on_change = on_change
        self.first_sync = asyncio.Event()
        self.start_lane = asyncio.Lock()  # one start at a time per node

    async def refresh(self) -> None:
        """Fetch the instances now (after a start or stop, not waiting for the long-poll)."""
        page = await self.client.instances()
        self._apply(page.version, page.instances)

    def _apply(self, version: int, instances: list[InstanceInfo]) -> None:
        self._version = version
        self.instances = {i.instance_id: i for i in instances}
        self.online, self.last_error = True, None
        self._on_change(self.node_id, self.instances)
        self.first_sync.set()

    async def run(self) -> None:
        """Long-poll the agent for instance changes until cancelled; reconnect on failure."""
        backoff = min(0.2, self.retry_max_s)
        while True:
            try:
                page = await self.client.instances(since=self._version if self._version is not None else -1,
                                                   timeout=LONG_POLL_S)
                self._apply(page.version, page.instances)
                backoff = min(0.2, self.retry_max_s)
            except AgentError as exc:
                # Before the first answer the agent may simply not be listening yet.
                level = logging.WARNING if self.first_sync.is_set() else logging.DEBUG
                if self.online or self.last_error != exc.message:
                    _LOGGER.log(level, "agent %s unreachable: %s", self.node_id, exc.message)
                self.online, self.last_error = False, exc.message
                self._version = None
                self._on_change(self.node_id, self.instances)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.retry_max_s)


class NodeLink(AgentLink):
    """A remote node's link: the monitor takes it offline and brings it back."""

    _task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._version = None  # ask for the full state at once, not for the next change
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"link-{self.node_id[:8]}")

    def mark_offline(self, reason: str) -> None:
        if self._task is not None:
            self._task.cancel()  # its long-poll would hang on a dead connection
            self._task = None
        self.online, self.last_error, self.instances = False, reason, {}
        self.first_sync.set()  # a verdict exists: callers need not wait for a first answer
        self._on_change(self.node_id, self.instances)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)


class Links:
    """The agents this daemon reaches now, by node id."""

    def __init__(self) -> None:
        self._by_node: dict[str, AgentLink] = {}

    def get(self, node_id: str) -> AgentLink | None:
        return self._by_node.get(node_id)

    def online_client(self, node_id: str) -> AgentClient:
        """The node's agent client for an API call, or the answer why not: 404 no such node, 503 offline."""
        link = self._by_node.get(node_id)
        if link is None:
            raise DaemonProblem(404, "node_unknown", f"no node '{node_id}'")
        if not link.online:
            raise DaemonProblem(503, "node_offline", f"node '{node_id}' is offline: {link.last_error}")
        return link.client

    def __getitem__(self, node_id: str) -> AgentLink:
        return self._by_node[node_id]

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_node

    def __iter__(self) -> Iterator[AgentLink]:
        return iter(list(self._by_node.values()))

    def __len__(self) -> int:
        return len(self._by_node)

    def add(self, link: AgentLink) -> None:
        self._by_node[link.node_id] = link

    def pop(self, node_id: str) -> AgentLink | None:
        return self._by_node.pop(node_id, None)
