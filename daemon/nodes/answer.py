"""Where an instance answers: the one decision the router, the health probe and the jobs share.

A runtime on this machine (the local node) that has an endpoint is reached straight on its
loopback port with its instance key: the hot path, on the caller's own session. Anything else
goes through its node's agent, ``/agent/v1/proxy/{id}``, on the agent client's pooled mutual-TLS
session; the agent adds the key there.

For the router a request's ``Target`` is one value for all three kinds: a runtime here, one
through its node's agent (``at_instance``, from ``answer_at``) and an external endpoint
(``at_endpoint``): where it answers, the path it is sent on, the name its body's ``model`` is
written as, the slot it holds and the node its access-log row names. The router decides it once
per request and asks no more about the runtime's kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from agent.api.client import AgentClient
from agent.api.models import InstanceInfo
from core.relay import Upstream
from core.runtime_http import RuntimePool
from daemon.api.models import LOCAL_NODE

_LOGGER = logging.getLogger(__name__)


def answer_at(node_id: str, instance: InstanceInfo, agent: AgentClient | None,
              local_session: aiohttp.ClientSession, local_pool: RuntimePool | None = None) -> Upstream:
    """Where ``instance`` on ``node_id`` answers: ``base`` + ``/v1/...`` with ``headers``.

    ``agent`` is the node's agent client (``AgentLink.client``); a LookupError without one where
    the answer is through it. ``local_pool``: the relay's lean client, for a plain-HTTP runtime here."""
    if node_id == LOCAL_NODE and instance.endpoint:
        headers = {"Authorization": f"Bearer {instance.api_key}"} if instance.api_key else {}
        pool = local_pool if instance.endpoint.startswith("http://") else None
        return Upstream(instance.endpoint, headers, local_session, False, instance.api_key or None, pool)
    if agent is None:
        raise LookupError(f"node '{node_id}' has no agent link to reach '{instance.instance_id}' through")
    return Upstream(agent.proxy_url(instance.instance_id, ""), {}, agent.session, agent.ssl)


@dataclass(slots=True)  # not frozen: a frozen one's __init__ costs three times as much, on every request
class Target:
    """Where one ``/v1`` request answers and how it is sent there (read, never changed)."""

    upstream: Upstream
    node: str | None  # the node its row and its trace name (the model's own: "auto" too); None: an endpoint
    release: Callable[[], None] | None = None  # frees the model's slot it holds until the answer ends; None: none
    model: str | None = None  # its body's ``model`` is written as this (a provider's name); None: as it came
    path_prefix: str = ""  # what the request's path loses on the way (an endpoint's base_url ends where /v1 does)

    def path(self, path_qs: str) -> str:
        """The path (and query) to send, for the request's ``path_qs``."""
        return path_qs.removeprefix(self.path_prefix) if self.path_prefix else path_qs


def at_instance(node: str, instance: InstanceInfo, agent: AgentClient | None, local_session: aiohttp.ClientSession,
                local_pool: RuntimePool | None, *, named: str, release: Callable[[], None]) -> Target:
    """A runtime's instance on ``node`` (``answer_at``), holding a slot that ``release`` frees;
    ``named``: the node the model's definition names, for its row."""
    return Target(answer_at(node, instance, agent, local_session, local_pool), named, release)


def at_endpoint(upstream: Upstream, provider_model: str) -> Target:
    """An external endpoint (``daemon.models.external``): no node, no slot, the provider's model name,
    and the request's path after ``/v1`` appended to its ``base_url``."""
    return Target(upstream, None, None, provider_model, "/v1")
