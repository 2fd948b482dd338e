"""Runtime instances a job starts and stops on one node, through that node's agent.

Tuning candidates run as their own instances (``{model}-tune-N``) next to an untouched registry;
``launch`` waits for ready (a failure is the candidate's, with the runtime's last log lines) and
``remove`` stops one and checks it is gone (a failure there stops the run: the node is in doubt).
``target`` says where a job's requests go (``daemon.nodes.answer`` decides: the loopback port with
the instance key for the local node, the agent's proxy for a remote one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

import aiohttp

from agent.api.client import AgentError
from agent.api.models import InstanceInfo, InstanceState, LaunchSpec
from daemon.jobs.calls import RuntimeTarget
from daemon.nodes.answer import answer_at
from daemon.nodes.links import AgentLink

_LOGGER = logging.getLogger(__name__)

POLL_S = 0.2
CLEANUP_TIMEOUT_S = 120.0
TUNE_SUFFIX = "-tune-"


class CandidateFailed(Exception):
    """A candidate could not be started or did not become ready; the run goes on."""


class NodeTrouble(Exception):
    """The node did not do what was asked (an instance would not go away): the run stops."""


def tune_instance_id(model_id: str, n: int) -> str:
    """``{model}-tune-{n}``, shortened to the 40 characters an instance id may have."""
    suffix = f"{TUNE_SUFFIX}{n}"
    return model_id[: 40 - len(suffix)].rstrip("-") + suffix


def is_tune_instance(instance_id: str) -> bool:
    head, sep, tail = instance_id.rpartition(TUNE_SUFFIX)
    return bool(sep and head and tail.isdigit())


def job_instances(model_id: str, instance_ids: Iterable[str]) -> set[str]:
    """The model's own instance and its tuning candidates among ``instance_ids``."""
    prefix = tune_instance_id(model_id, 0)[:-1]
    return {i for i in instance_ids if i == model_id or (i.startswith(prefix) and is_tune_instance(i))}


class NodeAccess:
    def __init__(self, link: AgentLink, session: aiohttp.ClientSession) -> None:
        self.link = link
        self.session = session

    def target(self, instance: InstanceInfo, served_name: str, read_timeout_s: float = 600.0,
               session: aiohttp.ClientSession | None = None) -> RuntimeTarget:
        """``session``: a candidate's own, so no pooled connection outlives its runtime (the next
        candidate may get the same port, and a write on the dead connection would fail)."""
        where = answer_at(self.link.node_id, instance, self.link.client, session or self.session)
        return RuntimeTarget(where.base, dict(where.headers), where.session, served_name, read_timeout_s)

    async def _current(self, instance_id: str) -> InstanceInfo | None:
        try:
            return await self.link.client.instance(instance_id)
        except AgentError as exc:
            if exc.status == 404:
                return None
            raise

    async def launch(self, spec: LaunchSpec) -> InstanceInfo:
        """Start ``spec`` and wait until it is ready; CandidateFailed says why it is not."""
        try:
            async with self.link.start_lane:
                await self.link.client.start(spec)
        except AgentError as exc:
            raise CandidateFailed(f"the agent refused the start: {exc.message}") from exc
        deadline = time.monotonic() + spec.startup_timeout_s + 10
        while True:
            info = await self._current(spec.instance_id)
            if info is not None and info.state == InstanceState.READY:
                return info
            if info is None or info.state in (InstanceState.FAILED, InstanceState.STOPPED):
                reason = (info.error if info else None) or "it stopped while starting"
                tail = " | ".join((info.last_log_lines if info else [])[-3:])
                raise CandidateFailed(f"{reason}{' — ' + tail if tail else ''}")
            if time.monotonic() > deadline:
                raise CandidateFailed(f"not ready after {spec.startup_timeout_s:.0f} s")
            await asyncio.sleep(POLL_S)

    async def remove(self, instance_id: str, timeout_s: float = CLEANUP_TIMEOUT_S) -> None:
        """Stop an instance and wait until it no longer runs; NodeTrouble when it will not go."""
        deadline = time.monotonic() + timeout_s
        try:
            await self.link.client.stop(instance_id, timeout=min(10.0, timeout_s))
        except AgentError as exc:
            if exc.status != 404:
                raise NodeTrouble(f"could not stop {instance_id}: {exc.message}") from exc
        while True:
            try:
                info = await self._current(instance_id)
            except AgentError as exc:
                raise NodeTrouble(f"cannot see whether {instance_id} stopped: {exc.message}") from exc
            if info is None or info.state in (InstanceState.STOPPED, InstanceState.FAILED):
                return
            if time.monotonic() > deadline:
                raise NodeTrouble(f"{instance_id} is still {info.state.value} after {timeout_s:.0f} s")
            await asyncio.sleep(POLL_S)

    async def remove_leftovers(self, registry_ids: set[str]) -> list[str]:
        """Stop tuning instances a previous daemon left running; the ids stopped."""
        stopped = []
        for instance_id, info in list(self.link.instances.items()):
            running = info.state in (InstanceState.STARTING, InstanceState.READY)
            if running and is_tune_instance(instance_id) and instance_id not in registry_ids:
                try:
                    await self.remove(instance_id)
                    stopped.append(instance_id)
                except NodeTrouble as exc:
                    _LOGGER.error("leftover tuning instance: %s", exc)
        return stopped


def runtime_session() -> aiohttp.ClientSession:
    """A session for benchmark requests: a fresh loopback connection per request (llama-server may
    close a kept-alive one as it is reused, which would fail the request, not measure it)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))
