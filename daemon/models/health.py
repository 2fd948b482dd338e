"""Models that look after themselves: crash restarts with backoff, pauses, stall probes, idle unload.

``HealthMonitor`` watches state changes and ticks once a second for the timed rules; what must
survive a daemon restart (wanted models, pauses) is the ``RestartBook`` of ``daemon.models.restarts``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp
from pydantic import BaseModel

from agent.api.runtimes import profile
from daemon.api.models import ModelState, ModelStatus
from daemon.models.maintenance import Maintenance
from daemon.models.orchestrator import Orchestrator
from daemon.models.restarts import RestartBook
from daemon.nodes.answer import answer_at
from daemon.nodes.links import Links

_LOGGER = logging.getLogger(__name__)


class HealthPolicy(BaseModel):
    backoff_s: tuple[float, ...] = (10.0, 30.0, 60.0)
    crash_limit: int = 3
    healthy_reset_s: float = 600.0
    probe_interval_s: float = 30.0
    probe_timeout_s: float = 15.0
    tick_s: float = 1.0
    stall_limit: int = 3  # answers cut for silence within stall_window_s that restart the model as a crash
    stall_window_s: float = 600.0

    def delay_after(self, crashes: int) -> float:
        return self.backoff_s[min(crashes, len(self.backoff_s)) - 1]


class HealthMonitor:
    def __init__(self, orchestrator: Orchestrator, links: Links, maintenance: Maintenance, policy: HealthPolicy,
                 in_flight: Callable[[str], int], clock: Callable[[], float] = time.monotonic) -> None:
        self.orch = orchestrator
        self.links = links
        self.maintenance = maintenance  # a job owns these models: no probes, no unloading
        self.policy = policy
        self._in_flight = in_flight  # by served name
        self._clock = clock
        self._restarts: dict[str, asyncio.Task[None]] = {}
        self._ready_since: dict[str, float] = {}
        self._last_probe: dict[str, float] = {}
        self._session: aiohttp.ClientSession | None = None
        self._expected_stop: set[str] = set()
        self._stalls: dict[str, list[float]] = {}  # model id -> when its answers were cut for silence
        self._stall_restarts: set[asyncio.Task[None]] = set()

    @property
    def book(self) -> RestartBook:
        return self.orch.book

    # --- state changes -------------------------------------------------------------------------
    def observe(self, model_id: str, previous: ModelState | None, status: ModelStatus) -> None:
        now = self._clock()
        if status.state == ModelState.READY:
            self._ready_since.setdefault(model_id, now)
        else:
            self._ready_since.pop(model_id, None)
        # A start that fails before it is ready (a bad argument, a file it cannot load) fails again the
        # same way: it is not retried, nor started again at the next boot. Only a model that was
        # running and crashed is restarted (and a restart that fails then counts as another crash).
        failed_start = previous == ModelState.STARTING and status.state == ModelState.FAILED
        if failed_start and not self.book.crashes.get(model_id):
            self.book.want(model_id, False)
            return
        crashed = (failed_start or previous == ModelState.READY and status.state == ModelState.FAILED) or \
                  (previous == ModelState.READY and status.state == ModelState.STOPPED)
        if status.state != ModelState.STARTING:
            expected = model_id in self._expected_stop
            self._expected_stop.discard(model_id)
            if expected:
                return
        link = self.links.get(status.node)
        if crashed and model_id in self.book.wanted and link is not None and link.online:
            self._on_crash(status)

    def _on_crash(self, status: ModelStatus) -> None:
        model_id = status.id
        crashes = self.book.crashes.get(model_id, 0) + 1
        self.book.crashes[model_id] = crashes
        if crashes >= self.policy.crash_limit:
            self.book.pause(status)
            _LOGGER.error("%s crashed %d times in a row; automatic restarts paused", model_id, crashes)
            self.orch.events.publish("model.restarts_paused", model_id, crashes=crashes, error=status.error)
            return
        delay = self.policy.delay_after(crashes)
        _LOGGER.warning("%s crashed (%d in a row); restarting in %.0f s", model_id, crashes, delay)
        self.orch.events.publish("model.crashed", model_id, crashes=crashes, restart_in_s=delay, error=status.error)
        old = self._restarts.pop(model_id, None)
        if old is not None:
            old.cancel()
        self._restarts[model_id] = asyncio.get_running_loop().create_task(self._restart_later(model_id, delay))

    async def _restart_later(self, model_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        if model_id not in self.book.wanted or model_id in self.book.pauses:
            return
        if self.orch.registry.get(model_id) is None:
            return
        try:
            _LOGGER.info("restarting %s after a crash", model_id)
            await self.orch.start(model_id, by_user=False)
        except Exception as exc:  # noqa: BLE001 - a failed restart is itself a crash to count
            _LOGGER.error("automatic restart of %s failed: %s", model_id, exc)

    def stream_stalled(self, model_id: str, why: str) -> None:
        """The router cut an answer of the model for silence (``core.relay``): flag it Stalled; the
        ``stall_limit``-th cut within ``stall_window_s`` restarts it through the crash path."""
        self.orch.stalled(model_id, why)
        definition = self.orch.registry.get(model_id)
        if definition is None or not profile(definition.runtime).on_node:
            return  # an external endpoint is flagged; there is nothing of ours to restart
        now = self._clock()
        cuts = [t for t in self._stalls.get(model_id, []) if now - t < self.policy.stall_window_s] + [now]
        self._stalls[model_id] = cuts
        if len(cuts) < self.policy.stall_limit:
            return
        self._stalls.pop(model_id, None)
        reason = f"{len(cuts)} answers cut for silence in {self.policy.stall_window_s:.0f} s; the last: {why}"
        task = asyncio.get_running_loop().create_task(self._restart_stalled(model_id, reason))
        self._stall_restarts.add(task)
        task.add_done_callback(self._stall_restarts.discard)

    async def _restart_stalled(self, model_id: str, reason: str) -> None:
        if model_id in self.maintenance:
            return
        status = self.orch.status_by_id(model_id)
        if status.state != ModelState.READY:
            return
        _LOGGER.error("%s stalls mid-answer (%s); restarting it", model_id, reason)
        self.orch.events.publish("model.stalled", model_id, reason=reason)
        self._expected_stop.add(model_id)
        await self.orch.stop(model_id, keep_wanted=True)
        self._on_crash(status.model_copy(update={"state": ModelState.FAILED, "error": reason}))

    # --- timed rules ---------------------------------------------------------------------------
    async def run(self) -> None:
        self._session = aiohttp.ClientSession()
        try:
            while True:
                await asyncio.sleep(self.policy.tick_s)
                try:
                    await self.tick()
                except Exception:
                    _LOGGER.exception("health tick failed")
        finally:
            await self._session.close()

    async def tick(self) -> None:
        now = self._clock()
        for definition in self.orch.registry.all():
            status = self.orch.status(definition)
            if status.state != ModelState.READY or definition.id in self.maintenance:
                continue  # a job owns a model under maintenance: no probes, no unloading
            since = self._ready_since.get(definition.id, now)
            if now - since >= self.policy.healthy_reset_s and self.book.crashes.get(definition.id):
                _LOGGER.info("%s healthy for %.0f s: crash count cleared", definition.id, now - since)
                self.book.clear(definition.id)
            busy = self._in_flight(definition.served_name) > 0
            last_used = self.orch.last_used(definition.id, since)
            if definition.idle_unload_seconds and not busy and now - last_used >= definition.idle_unload_seconds:
                _LOGGER.info("%s idle for %.0f s: unloading", definition.id, now - last_used)
                self.orch.events.publish("model.unloaded", definition.id, idle_s=now - last_used)
                await self.orch.stop(definition.id)  # no longer wanted: start_on_request brings it back
                continue
            if not busy and now - self._last_probe.get(definition.id, since) >= self.policy.probe_interval_s:
                self._last_probe[definition.id] = now
                await self._probe(definition.id, status)

    async def _probe(self, model_id: str, status: ModelStatus) -> None:
        """One token through the work path: /health can say ok while generation is wedged."""
        definition = self.orch.placed(self.orch.registry.require(model_id))  # node "auto": where it runs
        instance = self.orch.instance(definition)
        if instance is None or not instance.endpoint or definition.settings.embeddings:
            return
        link = self.links.get(definition.node)
        assert self._session is not None  # opened by run(), which ticks
        where = answer_at(definition.node, instance, link.client if link is not None else None, self._session)
        body = {"model": definition.served_name, "prompt": "ping", "max_tokens": 1, "temperature": 0}
        try:
            timeout = aiohttp.ClientTimeout(total=self.policy.probe_timeout_s)
            async with where.session.post(f"{where.base}/v1/completions", json=body, headers=dict(where.headers),
                                          timeout=timeout) as resp:
                if resp.status < 500:
                    return
                reason = f"work-path probe answered {resp.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = f"work-path probe failed: {type(exc).__name__} {exc}".strip()
        _LOGGER.error("%s is ready but does not generate (%s); restarting it", model_id, reason)
        self.orch.events.publish("model.stalled", model_id, reason=reason)
        stalled = status.model_copy(update={"state": ModelState.FAILED, "error": reason})
        self._expected_stop.add(model_id)
        await self.orch.stop(model_id, keep_wanted=True)
        self._on_crash(stalled)
