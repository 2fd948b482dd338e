"""Contracts of one llama.cpp model across nodes, as the daemon reports it (``daemon.models.rpc``).

A model whose definition names ``rpc_nodes`` runs on its node (the *main*) with part of its layers
held by an rpc-server on each *helper* node (``agent.api.rpc``). Its status lists the helpers:
which node, the grant its rpc-server was started for, and how the daemon sees it now.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

HelperState = Literal["ready", "offline", "failed", "stopped"]


class RpcHelper(BaseModel):
    """One helper node of a model running across nodes."""

    node: str = Field(description="The helper's node id.")
    state: HelperState = Field(description="ready: its rpc-server listens for this model; offline: its node does "
                               "not answer (the model is not ready); failed: its rpc-server did not start or "
                               "exited; stopped: no rpc-server runs for the model.")
    grant_id: str | None = Field(default=None, description="The grant its rpc-server was started for.")
    error: str | None = None
