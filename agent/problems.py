"""``AgentProblem``: a refusal the agent answers in its error shape, with machine-readable details.

Admission, downloads and imports raise subclasses; the server's error middleware turns any of
them into ``{"error": {"code", "message", "details"}}`` with its status.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class AgentProblem(Exception):
    """A request the agent refuses or cannot complete; ``message`` says what to do next."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.details = details or {}


def validation_message(exc: ValidationError, whole: str = "body") -> str:
    """Each field's name and pydantic's message (``whole`` names the input itself), never the value."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}" for e in exc.errors())


class InvalidModelFile(AgentProblem):
    """The file is not a GGUF model this agent will hand to a runtime."""

    status = 422
    code = "invalid_model_file"


class InsufficientMemory(AgentProblem):
    """The model would not fit in what is left after the reserve (start it with force to try anyway),
    or a helper node has less free than an rpc-server grant lends (``agent.rpc.servers``)."""

    status = 409
    code = "insufficient_memory"


class StartInProgress(AgentProblem):
    """On unified memory one model loads at a time; another is still loading."""

    status = 409
    code = "start_in_progress"


class RuntimeVersionMismatch(AgentProblem):
    """The model is pinned to a runtime version this node does not run (``agent.api.runtime_builds``)."""

    status = 409
    code = "runtime_version_mismatch"
