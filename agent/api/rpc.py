"""One llama.cpp model across nodes: the contracts of llama.cpp's RPC carried between two agents.

A *helper* node lends its memory to a model that runs on a *main* node. The daemon asks the helper
to start ``ggml-rpc-server`` for a *grant* (``RpcServerRequest``): the server listens on the
helper's 127.0.0.1 only, and the one way to it is the helper agent's tunnel route
(``rpc_tunnel_path``), over the agents' mutual TLS, for the peer the grant names (the main node's
id: the SHA-256 of its certificate, DER) and nobody else. The daemon then starts the model on the
main node with one ``RpcPeer`` per helper in its launch spec (``LaunchSpec.rpc_peers``); the main
agent opens a loopback listener per peer that forwards every connection through that helper's
tunnel, and llama-server gets ``--rpc 127.0.0.1:p1,...``. llama.cpp's RPC has no authentication
and must never face a network: nothing here opens it to one.

Routes on the helper (``/agent/v1``):

    POST   /rpc/servers               -> RpcServerInfo    # body: RpcServerRequest; daemon only; 201 ready
    GET    /rpc/servers               -> RpcServersPage   # daemon only
    GET    /rpc/servers/{grant_id}    -> RpcServerInfo    # daemon only
    DELETE /rpc/servers/{grant_id}    -> RpcServerInfo    # daemon only; stopped (the grant is closed)
    GET    /rpc/{grant_id}/tunnel     -> WebSocket        # the grant's peer only; binary frames = the RPC bytes

Every other route refuses a peer that is not the daemon (403 ``peer_not_allowed``); the tunnel
refuses a peer the grant does not name, and a grant that is not open (403 ``grant_not_open``).
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

GRANT_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{7,63}$"
NODE_ID_PATTERN = r"^[0-9a-f]{64}$"
RPC_SERVERS_PATH = "/rpc/servers"


def rpc_server_path(grant_id: str) -> str:
    return f"{RPC_SERVERS_PATH}/{grant_id}"


def rpc_tunnel_path(grant_id: str) -> str:
    """The tunnel route of a grant, under ``/agent/v1``."""
    return f"/rpc/{grant_id}/tunnel"


class RpcServerState(str, Enum):
    """An rpc-server on a helper, as its agent sees it."""

    READY = "ready"      # listening on the helper's loopback; its grant is open
    FAILED = "failed"    # it exited on its own (``error`` says how); the grant is closed
    STOPPED = "stopped"  # stopped by DELETE (or the agent's shutdown); the grant is closed


class RpcServerRequest(BaseModel):
    """Start ``ggml-rpc-server`` on this (helper) node for one grant."""

    model_config = ConfigDict(extra="forbid")

    grant_id: str = Field(pattern=GRANT_ID_PATTERN, description="The daemon's id for this grant (one rpc-server "
                          "each); starting an open grant again answers it as it is.")
    peer_node_id: str = Field(pattern=NODE_ID_PATTERN, description="The main node's id (SHA-256 of its agent "
                              "certificate, DER): the one peer the tunnel lets in.")
    memory_bytes: int | None = Field(default=None, gt=0, description="The memory this helper lends the model: "
                                     "refused (409 insufficient_memory) when it has less free (on the named GPUs, "
                                     "else in system memory); None: not checked.")
    gpus: list[int] | None = Field(default=None, max_length=16, description="The helper's GPUs (NVML indices) "
                                   "the server offers, as -d CUDA0,...; []: its CPU only; None: every GPU, else "
                                   "the CPU (rpc-server's own default).")
    threads: int | None = Field(default=None, ge=1, le=1024, description="CPU threads of its CPU device (-t).")


class RpcServerInfo(BaseModel):
    """One rpc-server on a helper node."""

    grant_id: str
    peer_node_id: str
    state: RpcServerState
    pid: int | None = None
    port: int | None = Field(default=None, description="Its port on the helper's 127.0.0.1: never reachable from "
                             "another machine (the tunnel is the way in).")
    devices: list[str] = Field(default_factory=list, description="The ggml devices it offers (CUDA0, CPU), as "
                               "-d named them; empty: rpc-server's own choice.")
    memory_bytes: int | None = None
    started_at: float | None = None
    error: str | None = None
    last_log_lines: list[str] = Field(default_factory=list)


class RpcServersPage(BaseModel):
    servers: list[RpcServerInfo]


class RpcPeer(BaseModel):
    """One helper in a llama.cpp launch spec (``LaunchSpec.rpc_peers``): where its tunnel is, which
    grant, and whose certificate the main agent must find there."""

    model_config = ConfigDict(extra="forbid")

    agent_url: str = Field(min_length=1, max_length=2048, pattern=r"^https://",
                           description="The helper agent's base URL (https://host:port), as the daemon reaches it.")
    grant_id: str = Field(pattern=GRANT_ID_PATTERN, description="The grant the helper opened for this model.")
    node_id: str = Field(pattern=NODE_ID_PATTERN, description="The helper's node id: the SHA-256 (DER) of the "
                         "certificate it must present; anything else is refused.")
    devices: int = Field(default=1, ge=1, le=16, description="How many devices its rpc-server offers: with "
                         "settings.gpus set, --device also names them (RPC0, RPC1, ... in peer order).")
