"""How a model runs across the fleet: ask each node's agent for its plan, and merge the answers.

Each agent plans for itself (``agent.placement``: it knows its GPUs and their free memory); the
daemon asks every online node at once (``fan_out``), names each option's node, lists the nodes
that gave no plan and why (offline, the file is not there), and adds the fleet's own option:
across nodes, which needs llama.cpp's RPC backend and is named as not available yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agent.api.client import AgentClient, AgentError
from agent.api.sources import FitRequest
from daemon.api.plan import NodePlan, NodePlanError, Plan, PlanOption, PlanQuery

ACROSS_NODES = ("needs llama.cpp's RPC backend (an rpc-server on each node, the layers shared over the network); "
                "MirbadLLM does not run it yet")


def agent_request(query: PlanQuery) -> FitRequest:
    """The agent's part of a plan query: the file, and the settings with the context asked."""
    settings = query.settings.model_copy(update={"ctx_size": query.ctx_size}) if query.ctx_size else query.settings
    return FitRequest(model_path=query.model_path, hf=query.hf, settings=settings, token=query.token)


def across_nodes(plans: Sequence[NodePlan]) -> list[PlanOption]:
    """The fleet's option of running one model over several nodes: named, not available yet."""
    if len(plans) < 2:
        return []
    names = ", ".join(p.node for p in plans)
    return [PlanOption(kind="nodes", label=f"across nodes {names} (llama.cpp RPC)", state="unavailable",
                       ctx_size=0, max_ctx_size=0, max_ctx_size_empty=0, message=ACROSS_NODES)]


def merge(plans: Sequence[NodePlan], errors: Sequence[NodePlanError]) -> Plan:
    """One plan of the nodes' answers, each option named with its node, and the fleet's options."""
    named = [p.model_copy(update={"options": [o.model_copy(update={"node": p.node}) for o in p.options]})
             for p in plans]
    first = named[0] if named else None
    return Plan(source=first.source if first else "", summary=first.summary if first else None, nodes=named,
                fleet=across_nodes(named), errors=list(errors))


async def fan_out(clients: Sequence[tuple[str, AgentClient]], request: FitRequest,
                  errors: Sequence[NodePlanError] = ()) -> Plan:
    """Every node's plan at once; a node that fails is listed with its error. When every node
    failed, the first error to come back is raised (AgentError), as a one-node call's would be."""

    raised: list[AgentError] = []

    async def one(node: str, client: AgentClient) -> NodePlan | NodePlanError:
        try:
            return (await client.plan(request)).model_copy(update={"node": node})
        except AgentError as exc:
            raised.append(exc)
            return NodePlanError(node=node, code=exc.code, message=exc.message)

    answers = await asyncio.gather(*(one(node, client) for node, client in clients))
    plans = [a for a in answers if isinstance(a, NodePlan)]
    if raised and not plans:
        raise raised[0]
    return merge(plans, [*errors, *(a for a in answers if isinstance(a, NodePlanError))])
