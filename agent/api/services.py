"""Contracts of host services: the OS's own services on a node (systemd units, launchd jobs, Windows
services) that an operator may start, stop and restart from the daemon.

Spoken on ``/agent/v1`` (see ``AgentClient``) and re-exported to the app through ``daemon.api.services``.
The agent decides what may be touched (``agent.services.policy``): a compiled-in deny list nothing
sent can shrink, a whitelist (the agent's ``services.json`` plus the names the daemon sends), and
protected services an action names by typing their name (``confirm``). New fields are additive.

    GET  /services                     -> ServicesList        # ?all=0|1&allow=NAME (repeated)
    POST /services/{name}/{action}     -> ServiceActionResult # action: start|stop|restart; body: ServiceActionRequest
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

ServiceAction = Literal["start", "stop", "restart"]
SERVICE_ACTIONS: tuple[ServiceAction, ...] = ("start", "stop", "restart")
ManagerKind = Literal["systemd", "launchd", "scm", "none"]

# Refusal codes (403 unless said): the agent's and the daemon's answers use the same ones.
DENIED = "service_denied"                # on the compiled-in deny list (or one the agent's file adds)
NOT_WHITELISTED = "service_not_whitelisted"
CONFIRM_REQUIRED = "service_confirm_required"  # protected: the request must carry its typed name
NOT_FOUND = "service_not_found"          # 404: the OS has no such service
INVALID_NAME = "service_invalid_name"    # 422: not a name any service manager uses
ACTION_FAILED = "service_action_failed"  # 502: the service manager refused or failed
NO_MANAGER = "service_manager_unavailable"  # 503: no service manager this agent can drive


class ServiceState(str, Enum):
    RUNNING = "running"
    STOPPED = "stopped"
    STARTING = "starting"
    STOPPING = "stopping"
    FAILED = "failed"
    UNKNOWN = "unknown"


class ServiceInfo(BaseModel):
    """One service as the node's service manager reports it, with what the policy allows."""

    name: str = Field(description="The manager's own name: a unit id (sshd.service), a launchd label, "
                      "a Windows service name.")
    display_name: str = ""
    description: str = ""
    aliases: list[str] = Field(default_factory=list, description="Other names of the same service "
                               "(systemd's alias units); the policy checks each.")
    state: ServiceState = ServiceState.UNKNOWN
    detail: str = Field(default="", description="The manager's own words for the state: systemd's "
                        "sub-state, launchd's state, the SCM's state name.")
    enabled: bool | None = Field(default=None, description="Starts at boot; None: not known.")
    pid: int | None = None
    whitelisted: bool = False
    protected: bool = Field(default=False, description="An action must carry the typed name as confirm.")
    denied_by: str | None = Field(default=None, description="The deny-list pattern that matched: "
                                  "never manageable from here.")

    @property
    def manageable(self) -> bool:
        return self.whitelisted and self.denied_by is None


class ServicesList(BaseModel):
    manager: ManagerKind
    services: list[ServiceInfo] = Field(default_factory=list)
    deny_patterns: list[str] = Field(default_factory=list)
    protected_patterns: list[str] = Field(default_factory=list)
    error: str | None = Field(default=None, description="Why the listing is empty or partial.")


class ServiceActionRequest(BaseModel):
    confirm: str | None = Field(default=None, max_length=256,
                                description="The service's name, typed: required for a protected one.")
    allow: list[str] = Field(default_factory=list, max_length=500,
                             description="Names the daemon whitelists, on top of the agent's own.")
    protect: list[str] = Field(default_factory=list, max_length=500,
                               description="Names the daemon protects, on top of the agent's own.")


class ServiceActionResult(BaseModel):
    action: ServiceAction
    service: ServiceInfo
    message: str = ""
