"""Host services in the daemon's admin API: the agent's contracts (``agent.api.services``), re-exported
so the app sees only ``daemon.api``, and the body of an action.

    GET  /api/nodes/{id}/services                    -> ServicesList        # ?all=0|1
    POST /api/nodes/{id}/services/{name}/{action}    -> ServiceActionResult # start|stop|restart; body: ServiceActionBody
"""

from __future__ import annotations

from pydantic import BaseModel, Field

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

__all__ = ["ACTION_FAILED", "CONFIRM_REQUIRED", "DENIED", "INVALID_NAME", "NOT_FOUND", "NOT_WHITELISTED",
           "NO_MANAGER", "SERVICE_ACTIONS", "ServiceAction", "ServiceActionBody", "ServiceActionResult",
           "ServiceInfo", "ServiceState", "ServicesList"]


class ServiceActionBody(BaseModel):
    confirm: str | None = Field(default=None, max_length=256,
                                description="The service's name, typed by the person: required for a protected one.")
