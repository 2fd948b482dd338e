"""``AgentProblem``: the agent's one error type, and ``errors_middleware``, its one error middleware.

A handler or a part refuses a request by raising an ``AgentProblem`` (or a subclass: admission,
downloads, imports, services, pairing); the middleware answers it as ``{"error": {"code",
"message", "details"}}`` with its status (``agent.api.models.ErrorEnvelope``; ``details`` holds the
figures behind a refusal, ``{}`` when there are none). Both of the agent's apps use the middleware:
the paired one (``agent.server``) and the unpaired one (``agent.pairing.server``), each with a
``translate`` for the exceptions of its own parts that are no ``AgentProblem``. Anything else is
logged and answered 500 ``internal``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import ValidationError

_LOGGER = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AgentProblem(Exception):
    """A request the agent refuses or cannot complete; ``message`` says what to do next."""

    status = 400
    code = "bad_request"

    def __init_subclass__(cls, *, status: int | None = None, code: str | None = None, **kwargs: Any) -> None:
        """A family of refusals declares its answer once: ``class Gone(AgentProblem, status=404, code="gone")``."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.details = details or {}

    def response(self) -> web.Response:
        """The answer: this problem's status and the agent's error envelope."""
        return web.json_response({"error": {"code": self.code, "message": self.message, "details": self.details}},
                                 status=self.status)


def _none(_exc: Exception) -> AgentProblem | None:
    return None


def errors_middleware(translate: Callable[[Exception], AgentProblem | None] = _none) -> Middleware:
    """The agent's error middleware: an ``AgentProblem`` as its answer; an exception ``translate``
    names (a part's own, or an HTTP error the app words its own way) as what it says; any other HTTP
    error >= 400 with its status and reason as code; anything else logged and 500 ``internal``."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except AgentProblem as refused:
            return refused.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            answer = translate(exc) or AgentProblem(exc.text or exc.reason, status=exc.status,
                                                    code=exc.reason.lower().replace(" ", "_"))
            return answer.response()
        except ConnectionResetError:
            raise  # the client went away: nobody to answer
        except Exception as exc:  # every error is answered in the agent's shape
            known = translate(exc)
            if known is not None:
                return known.response()
            _LOGGER.exception("%s %s failed", request.method, request.path)
            return AgentProblem("the agent failed on this request; see its log", status=500,
                                code="internal").response()

    return errors


def validation_message(exc: ValidationError, whole: str = "body") -> str:
    """Each field's name and pydantic's message (``whole`` names the input itself), never the value."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}" for e in exc.errors())


class InvalidModelFile(AgentProblem, status=422, code="invalid_model_file"):
    """The file is not a GGUF model this agent will hand to a runtime."""


class InsufficientMemory(AgentProblem, status=409, code="insufficient_memory"):
    """The model would not fit in what is left after the reserve (start it with force to try anyway),
    or a helper node has less free than an rpc-server grant lends (``agent.rpc.servers``)."""


class StartInProgress(AgentProblem, status=409, code="start_in_progress"):
    """On unified memory one model loads at a time; another is still loading."""


class RuntimeVersionMismatch(AgentProblem, status=409, code="runtime_version_mismatch"):
    """The model is pinned to a runtime version this node does not run (``agent.api.runtime_builds``)."""
