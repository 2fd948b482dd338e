"""The agent answers every error one way: ``agent.problems.AgentProblem`` through its one middleware,
``errors_middleware``, in the paired app and the unpaired one alike. No other module of the agent
writes the ``{"error": ...}`` envelope by hand; a violation names the file and the line."""

from __future__ import annotations

import ast
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agent.problems import AgentProblem, errors_middleware

ROOT = Path(__file__).resolve().parents[2]
ONE_HOME = Path("agent/problems.py")


class _PartFailed(Exception):
    """A part's own exception, which the app's ``translate`` names."""


def _translate(exc: Exception) -> AgentProblem | None:
    if isinstance(exc, _PartFailed):
        return AgentProblem(str(exc), status=503, code="part_failed")
    if isinstance(exc, web.HTTPNotFound):
        return AgentProblem("only /known answers", status=404, code="not_here")
    return None


async def test_every_error_is_the_one_envelope() -> None:
    async def refused(_request: web.Request) -> web.Response:
        raise AgentProblem("needs 9 GiB", status=409, code="insufficient_memory", details={"needed_bytes": 9})

    async def part(_request: web.Request) -> web.Response:
        raise _PartFailed("no llama-server")

    async def crash(_request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app = web.Application(middlewares=[errors_middleware(_translate)])
    app.router.add_routes([web.get("/refused", refused), web.get("/part", part), web.get("/crash", crash)])
    async with TestClient(TestServer(app)) as client:
        answers = {}
        for method, path in (("GET", "/refused"), ("GET", "/part"), ("GET", "/crash"), ("GET", "/nowhere"),
                             ("POST", "/refused")):
            resp = await client.request(method, path)
            answers[f"{method} {path}"] = (resp.status, await resp.json())
    assert answers == {
        "GET /refused": (409, {"error": {"code": "insufficient_memory", "message": "needs 9 GiB",
                                         "details": {"needed_bytes": 9}}}),
        "GET /part": (503, {"error": {"code": "part_failed", "message": "no llama-server", "details": {}}}),
        "GET /crash": (500, {"error": {"code": "internal", "message": "the agent failed on this request; see its log",
                                       "details": {}}}),
        "GET /nowhere": (404, {"error": {"code": "not_here", "message": "only /known answers", "details": {}}}),
        "POST /refused": (405, {"error": {"code": "method_not_allowed", "message": "405: Method Not Allowed",
                                          "details": {}}}),
    }


def _keys(node: ast.Dict) -> set[object]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant)}


def envelopes_by_hand(source: str) -> list[int]:
    """Lines that build the error envelope themselves: ``{"error": {"code": ...}}`` as a literal."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Dict)
                  and any(isinstance(k, ast.Constant) and k.value == "error" and isinstance(v, ast.Dict)
                          and "code" in _keys(v) for k, v in zip(node.keys, node.values, strict=True)))


def test_no_error_envelope_by_hand_in_the_agent() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "agent").rglob("*.py"))
             if path.relative_to(ROOT) != ONE_HOME
             for line in envelopes_by_hand(path.read_text(encoding="utf-8"))]
    assert found == [], "raise an AgentProblem (agent.problems), or return its .response()"


def test_the_envelope_check_sees_one() -> None:
    source = ('def refusal(code, message):\n'
              '    return web.json_response({"error": {"code": code, "message": message}}, status=403)\n')
    assert envelopes_by_hand(source) == [2]
    assert envelopes_by_hand('facts = {"error": None}\nentry = {"error": f"no version ({code})"}\n') == []
