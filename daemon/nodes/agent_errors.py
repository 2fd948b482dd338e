"""The one answer to a failed call to a node's agent: ``agent_problem`` turns an ``AgentError`` into a ``DaemonProblem``.

``AgentClient`` (``agent.api.client``) raises ``AgentError`` for every failure: an answer >= 400
(the agent's status, code, message and details), or none at all (status 0; ``unreachable``, with
the aiohttp error as its cause, or ``timeout``). The daemon's client sees:

    the agent's side                              the daemon's answer
    no answer: refused, reset, no route            502 node_unreachable
    no answer: the agent's certificate refused     502 node_tls_failed
    no answer in time                              504 node_timeout
    an answer 401                                  502 and the agent's code (the daemon's 401 means a wrong admin token)
    an answer 500                                  502 and the agent's code (the daemon's 500 means a bug in the daemon)
    any other answer >= 400                        its status and code (409 insufficient_memory, 403 service_denied, 507 ...)

The errors middleware (``daemon.server``) answers an ``AgentError`` no handler caught through this
mapping, so a handler catches one only to do something on failure (retry, fall back to another
node, mark a node offline, record it) and then, where the client is answered, raises
``agent_problem(exc)``. ``tests/unit/test_agent_error_mapping.py`` holds the table and the rule.
"""

from __future__ import annotations

import logging
import ssl
from typing import TypeVar, overload

import aiohttp

from agent.api.client import AgentError
from daemon.errors import DaemonProblem

_LOGGER = logging.getLogger(__name__)

P = TypeVar("P", bound=DaemonProblem)

# What the daemon's own answer with that status means; the agent's is a bad gateway to its client.
_NOT_PASSED_ON = {401: 502, 500: 502}


def tls_failed(exc: BaseException) -> bool:
    """Whether a call failed in the TLS handshake on this side (the agent's certificate not trusted).
    An agent refusing this daemon's certificate only closes the connection (TLS 1.3): unreachable."""
    seen: BaseException | None = exc
    for _ in range(8):  # AgentError <- aiohttp's error <- ssl's: a chain is short
        if seen is None:
            break
        if isinstance(seen, aiohttp.ClientSSLError | ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@overload
def agent_problem(exc: AgentError, *, about: str = "") -> DaemonProblem: ...
@overload
def agent_problem(exc: AgentError, kind: type[P], *, about: str = "") -> P: ...


def agent_problem(exc: AgentError, kind: type[DaemonProblem] = DaemonProblem, *, about: str = "") -> DaemonProblem:
    """The daemon's answer to ``exc`` (the table above), as ``kind``; ``about`` says what the call was
    for and comes before the message ("helper node 'b' could not start its rpc-server: ...")."""
    status, code, message = _answer(exc)
    return kind(status, code, f"{about}: {message}" if about else message)


def _answer(exc: AgentError) -> tuple[int, str, str]:
    if exc.status != 0:
        return _NOT_PASSED_ON.get(exc.status, exc.status), exc.code, exc.message
    if exc.code == "timeout":
        return 504, "node_timeout", (f"The node's agent did not answer in time ({exc.message}); it may be busy "
                                     "or its network slow: try again, and read the node's agent log if it lasts.")
    if tls_failed(exc):
        return 502, "node_tls_failed", (f"The node's agent presented a certificate this daemon does not trust "
                                        f"({exc.message}). If the node was reset or paired with another daemon, "
                                        "remove it and pair it again.")
    return 502, "node_unreachable", (f"The node's agent could not be reached ({exc.message}); is it running, its "
                                     "port open to this machine, and still paired with this daemon?")
