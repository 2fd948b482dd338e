"""Host services in the daemon's admin API: the agent's contracts (``agent.api.services``), re-exported
so the app sees only ``daemon.api``, and the body of an action.

    GET  /api/nodes/{id}/services                    -> ServicesList        # ?all=0|1
    POST /api/nodes/{id}/services/{name}/{action}    -> ServiceActionResult # start|stop|restart; body: ServiceActionBody
    GET  /api/services/policy                        -> ServicesPolicy      # the daemon's services.json
    PUT  /api/services/policy                        -> ServicesPolicy      # body: ServiceNames (every node's)
    GET  /api/nodes/{id}/services/policy             -> ServicesPolicy      # nodes: only this one
    PUT  /api/nodes/{id}/services/policy             -> ServicesPolicy      # body: ServiceNames (this node's)

``with_allowed`` and ``without`` are the edits ``mirbadllm ctl services allow|disallow`` and the
Services page make to a ``ServiceNames`` before they PUT it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent.api.service_names import (
    DENY_PATTERNS,
    PROTECTED_PATTERNS,
    deny_match,
    normalise,
    valid_service_name,
)
from agent.api.services import (
    ACTION_FAILED,
    CONFIRM_REQUIRED,
    DENIED,
    INVALID_NAME,
    NO_MANAGER,
    NOT_FOUND,
    NOT_WHITELISTED,
    SERVICE_ACTIONS,
    ServiceAction,
    ServiceActionResult,
    ServiceInfo,
    ServicesList,
    ServiceState,
)

__all__ = ["ACTION_FAILED", "CONFIRM_REQUIRED", "DENIED", "DENY_PATTERNS", "INVALID_NAME", "NOT_FOUND",
           "NOT_WHITELISTED", "NO_MANAGER", "POLICY_UNREADABLE", "PROTECTED_PATTERNS", "SERVICE_ACTIONS",
           "ServiceAction", "ServiceActionBody", "ServiceActionResult", "ServiceInfo", "ServiceNames",
           "ServiceState", "ServicesList", "ServicesPolicy", "deny_match", "normalise", "valid_service_name",
           "with_allowed", "without"]

POLICY_UNREADABLE = "services_policy_unreadable"  # 409: the file is not valid JSON of this shape


class ServiceActionBody(BaseModel):
    confirm: str | None = Field(default=None, max_length=256,
                                description="The service's name, typed by the person: required for a protected one.")


class ServiceNames(BaseModel):
    """One block of the daemon's ``services.json``: every node's, or one node's (under ``nodes``).
    Names are stored normalised (``normalise``); a protected name need not be whitelisted too."""

    allow: list[str] = Field(default_factory=list, max_length=500,
                             description="Services the daemon whitelists (on top of each agent's own).")
    protected: list[str] = Field(default_factory=list, max_length=500,
                                 description="Services whose actions need their name typed.")


class ServicesPolicy(BaseModel):
    """The daemon's whitelist as stored, with the deny list no entry can override."""

    allow: list[str] = Field(default_factory=list)
    protected: list[str] = Field(default_factory=list)
    nodes: dict[str, ServiceNames] = Field(default_factory=dict, description="Per node id: added to the above.")
    deny_patterns: list[str] = Field(default_factory=lambda: list(DENY_PATTERNS),
                                     description="Compiled into every agent: never manageable, never whitelisted.")
    protected_patterns: list[str] = Field(default_factory=lambda: list(PROTECTED_PATTERNS))
    error: str | None = Field(default=None, description="Why the file could not be read (nothing is sent from it).")

    def names(self, node_id: str | None) -> ServiceNames:
        """Every node's block (None), or ``node_id``'s own."""
        if node_id is None:
            return ServiceNames(allow=list(self.allow), protected=list(self.protected))
        return self.nodes.get(node_id, ServiceNames()).model_copy(deep=True)


def _add(names: list[str], name: str) -> list[str]:
    return names if normalise(name) in {normalise(n) for n in names} else [*names, normalise(name)]


def with_allowed(names: ServiceNames, name: str, protected: bool = False) -> ServiceNames:
    """``names`` with ``name`` whitelisted (and protected, if asked)."""
    return ServiceNames(allow=_add(names.allow, name),
                        protected=_add(names.protected, name) if protected else list(names.protected))


def without(names: ServiceNames, name: str) -> ServiceNames:
    """``names`` with ``name`` neither whitelisted nor protected."""
    key = normalise(name)
    return ServiceNames(allow=[n for n in names.allow if normalise(n) != key],
                        protected=[n for n in names.protected if normalise(n) != key])
