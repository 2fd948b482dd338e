"""The HTTP app of an unpaired agent: only the pairing routes of ``agent.api.pairing``.

Served over TLS 1.3 with the agent's self-signed certificate and no client certificate. Every
other path answers 404 ``not_paired``: nothing about instances or the machine is exposed before a
daemon has proven the code. Route table (``/agent/v1``):

    GET  /pairing              -> PairingInfo
    POST /pairing/challenge    -> PairingChallenge
    POST /pairing/complete     -> PairingResult     # body: PairingComplete
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from pydantic import ValidationError

from agent.api.models import API_PREFIX
from agent.api.pairing import PairingComplete, PairingResult
from agent.pairing.service import PairingRefused, PairingService
from agent.problems import AgentProblem, errors_middleware

SERVICE = web.AppKey("pairing_service", PairingService)
MAX_PAIRING_BODY = 64 * 1024


def _not_paired(exc: Exception) -> AgentProblem | None:
    """Every path but the pairing routes: this agent is not paired yet."""
    if isinstance(exc, web.HTTPNotFound):
        return AgentProblem(f"This agent is waiting to be paired; only {API_PREFIX}/pairing answers until then.",
                            status=404, code="not_paired")
    return None


async def pairing_info(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].info().model_dump(mode="json"))


async def pairing_challenge(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].challenge().model_dump(mode="json"))


def create_pairing_app(service: PairingService,
                       on_paired: Callable[[PairingResult], None]) -> web.Application:
    """``on_paired`` runs once the successful answer is on its way, so the caller may close us."""

    async def pairing_complete(request: web.Request) -> web.StreamResponse:
        try:
            body = PairingComplete.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            raise PairingRefused(f"not a pairing completion: {exc}", status=422, code="bad_request") from exc
        result = service.complete(body)
        response = web.json_response(result.model_dump(mode="json"))
        await response.prepare(request)
        await response.write_eof()  # written before the server that carries it is closed
        on_paired(result)
        return response

    app = web.Application(client_max_size=MAX_PAIRING_BODY, middlewares=[errors_middleware(_not_paired)])
    app[SERVICE] = service
    p = API_PREFIX
    app.router.add_routes([
        web.get(f"{p}/pairing", pairing_info),
        web.post(f"{p}/pairing/challenge", pairing_challenge),
        web.post(f"{p}/pairing/complete", pairing_complete),     # body: PairingComplete
    ])
    return app
