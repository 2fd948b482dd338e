"""One answer to a node agent's failure: ``daemon.nodes.agent_errors.agent_problem`` maps each kind of
``AgentError`` to the daemon's status and code, the daemon's errors middleware answers an uncaught one
through it, and no other code in the daemon builds an answer from an agent's status or code by hand.
A violation names the file and the line."""

from __future__ import annotations

import ast
import ssl
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agent.api.client import AgentError
from daemon import server
from daemon.errors import DaemonProblem
from daemon.models.orchestrator import OrchestratorError
from daemon.nodes.agent_errors import agent_problem

ROOT = Path(__file__).resolve().parents[2]
MAPPING = Path("daemon/nodes/agent_errors.py")


def _unreachable(cause: BaseException) -> AgentError:
    """An ``AgentError`` as ``AgentClient`` raises it for no answer: the aiohttp error as its cause."""
    try:
        raise AgentError(0, "unreachable", f"https://10.0.0.7:7401: {cause}") from cause
    except AgentError as exc:
        return exc


def _certificate_refused() -> BaseException:
    key = aiohttp.client_reqrep.ConnectionKey("10.0.0.7", 7401, True, True, None, None, None)
    return aiohttp.ClientConnectorCertificateError(key, ssl.SSLCertVerificationError(1, "certificate verify failed"))


@pytest.mark.parametrize(("failure", "status", "code"), [
    (lambda: _unreachable(ConnectionRefusedError(111, "Connection refused")), 502, "node_unreachable"),
    (lambda: _unreachable(aiohttp.ServerDisconnectedError()), 502, "node_unreachable"),  # our certificate refused
    (lambda: _unreachable(_certificate_refused()), 502, "node_tls_failed"),  # the agent's not trusted
    (lambda: AgentError(0, "timeout", "https://10.0.0.7:7401: no answer in time"), 504, "node_timeout"),
    (lambda: AgentError(401, "unauthorized", "who are you"), 502, "unauthorized"),  # not "your admin token"
    (lambda: AgentError(500, "internal", "the agent failed on this request; see its log"), 502, "internal"),
    (lambda: AgentError(404, "instance_not_found", "no instance 'm'"), 404, "instance_not_found"),
    (lambda: AgentError(409, "insufficient_memory", "not enough memory", {"needed_bytes": 9}), 409,
     "insufficient_memory"),
    (lambda: AgentError(403, "service_confirm_required", "say which"), 403, "service_confirm_required"),
    (lambda: AgentError(422, "invalid_model_file", "not a GGUF file"), 422, "invalid_model_file"),
    (lambda: AgentError(502, "hub_unreachable", "huggingface.co did not answer"), 502, "hub_unreachable"),
    (lambda: AgentError(503, "no_runtime", "no llama-server"), 503, "no_runtime"),
    (lambda: AgentError(507, "not_enough_memory", "only 1.0 GiB free"), 507, "not_enough_memory"),
])
def test_each_kind_of_agent_failure_has_one_answer(failure: object, status: int, code: str) -> None:
    exc = failure()  # type: ignore[operator]
    problem = agent_problem(exc)
    assert (type(problem), problem.status, problem.code) == (DaemonProblem, status, code)
    if exc.status:
        assert problem.message == exc.message  # the agent's own words: it says what to do next
    else:
        assert exc.message in problem.message  # where it was tried, and what failed


def test_the_answer_comes_as_the_kind_asked_for_and_says_what_the_call_was_for() -> None:
    problem = agent_problem(AgentError(409, "insufficient_memory", "only 1.0 GiB free"), OrchestratorError,
                            about="helper node 'b' could not start its rpc-server")
    assert isinstance(problem, OrchestratorError)
    assert (problem.status, problem.code) == (409, "insufficient_memory")
    assert problem.message == "helper node 'b' could not start its rpc-server: only 1.0 GiB free"


async def test_the_daemon_answers_an_agent_error_no_handler_caught() -> None:
    stub = SimpleNamespace(config=SimpleNamespace(loopback_only=False), admin_token="t",
                           paths=SimpleNamespace(admin_token="token"), router=SimpleNamespace(access_log=None))
    # The daemon's own errors middleware, without the rest of the daemon.
    errors = next(m for m in server._middlewares(stub) if getattr(m, "__name__", "") == "errors")  # type: ignore[arg-type]

    async def fails(_request: web.Request) -> web.Response:
        raise AgentError(0, "timeout", "https://10.0.0.7:7401: no answer in time")

    app = web.Application(middlewares=[errors])
    app.router.add_get("/api/fit", fails)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/api/fit")
        body = await resp.json()
    assert (resp.status, body["error"]["code"], body["error"]["type"]) == (504, "node_timeout", "server_error")


# --- the rule: no hand translation ------------------------------------------------------------------
def _problem_classes() -> set[str]:
    """``DaemonProblem`` and the daemon's classes that derive from it, by name."""
    bases: dict[str, set[str]] = {}
    for path in (ROOT / "daemon").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(b.id for b in node.bases if isinstance(b, ast.Name))
    found = {"DaemonProblem"}
    while grown := {name for name, of in bases.items() if of & found} - found:
        found |= grown
    return found


def _catches_agent_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id == "AgentError" for k in kinds)


def _reads(arg: ast.expr, name: str) -> bool:
    """``arg`` is ``name.status`` or ``name.code``, alone or as a side of ``or`` / ``if else``."""
    if isinstance(arg, ast.Attribute):
        return isinstance(arg.value, ast.Name) and arg.value.id == name and arg.attr in ("status", "code")
    if isinstance(arg, ast.BoolOp):
        return any(_reads(v, name) for v in arg.values)
    if isinstance(arg, ast.IfExp):
        return _reads(arg.body, name) or _reads(arg.orelse, name)
    return False


def hand_translations(source: str, problems: set[str]) -> list[int]:
    """Lines that answer an ``AgentError`` by hand: inside ``except AgentError as exc`` (or a function
    taking ``exc: AgentError``), an ``error_response(...)`` or a ``DaemonProblem`` built from
    ``exc.status`` / ``exc.code``. ``agent_problem(exc)`` is the one way."""
    scopes: list[tuple[str | None, list[ast.stmt]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and node.type is not None and _catches_agent_error(node):
            scopes.append((node.name, node.body))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scopes += [(a.arg, node.body) for a in node.args.args
                       if isinstance(a.annotation, ast.Name) and a.annotation.id == "AgentError"]
    lines = set()
    for name, body in scopes:
        for call in (c for stmt in body for c in ast.walk(stmt) if isinstance(c, ast.Call)):
            callee = call.func.id if isinstance(call.func, ast.Name) else \
                call.func.attr if isinstance(call.func, ast.Attribute) else ""
            if callee == "error_response" or (callee in problems and name is not None and any(
                    _reads(a, name) for a in [*call.args, *(k.value for k in call.keywords)])):
                lines.add(call.lineno)
    return sorted(lines)


def test_no_hand_translation_of_an_agent_error_in_the_daemon() -> None:
    problems = _problem_classes()
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "daemon").rglob("*.py"))
             if path.relative_to(ROOT) != MAPPING
             for line in hand_translations(path.read_text(encoding="utf-8"), problems)]
    assert found == [], "let the AgentError reach the errors middleware, or raise agent_problem(exc)"


def test_the_hand_translation_check_sees_one() -> None:
    problems = _problem_classes()
    assert {"OrchestratorError", "PairingFailed", "HelperRefused"} <= problems
    source = '''
async def one(client):
    try:
        return await client.status()
    except AgentError as exc:
        return error_response(exc.status or 502, exc.code, exc.message)

async def two(client):
    try:
        await client.stop("m")
    except (AgentError, TimeoutError) as exc:
        if exc.status != 404:
            raise OrchestratorError(exc.status or 502, "stop_failed", exc.message) from exc

def three(exc: AgentError):
    return PairingFailed(exc.status if exc.status in (403, 409) else 502, exc.code, exc.message)

async def fine(client):
    try:
        await client.stop("m")
    except AgentError as exc:
        if exc.status != 404:
            raise agent_problem(exc, OrchestratorError) from exc
        _LOGGER.info("gone already: %s (%s)", exc.message, exc.code)
'''
    assert hand_translations(source, problems) == [6, 13, 16]
