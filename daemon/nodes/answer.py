"""Where an instance answers: the one decision the router, the health probe and the jobs share.

A runtime on this machine (the local node) that has an endpoint is reached straight on its
loopback port with its instance key: the hot path, on the caller's own session. Anything else
goes through its node's agent, ``/agent/v1/proxy/{id}``, on the agent client's pooled mutual-TLS
session; the agent adds the key there.
"""

from __future__ import annotations

import aiohttp

from agent.api.client import AgentClient
from agent.api.models import InstanceInfo
from core.relay import Upstream
from core.runtime_http import RuntimePool
from daemon.api.models import LOCAL_NODE


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
