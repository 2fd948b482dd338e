"""The HTTP app of an unpaired agent: only the pairing routes of ``agent.api.pairing``.

Served over TLS 1.3 with the agent's self-signed certificate and no client certificate. Every
other path answers 404 ``not_paired``: nothing about instances or the machine is exposed before a
daemon has proven the code. Route table (``/agent/v1``):

    GET  /pairing              -> PairingInfo
    POST /pairing/challenge    -> PairingChallenge
    POST /pairing/complete     -> PairingResult     # body: PairingComplete
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic import ValidationError

from agent.api.models import API_PREFIX
from agent.api.pairing import PairingComplete, PairingResult
from agent.pairing.service import PairingRefused, PairingService

SERVICE = web.AppKey("pairing_service", PairingService)
MAX_PAIRING_BODY = 64 * 1024


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


@web.middleware
async def _errors(request: web.Request,
                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    try:
        return await handler(request)
    except PairingRefused as exc:
        return _error(exc.status, exc.code, exc.message)
    except web.HTTPNotFound:
        return _error(404, "not_paired", "This agent is waiting to be paired; only "
                      f"{API_PREFIX}/pairing answers until then.")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.text or exc.reason)


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
            raise PairingRefused(422, "bad_request", f"not a pairing completion: {exc}") from exc
        result = service.complete(body)
        response = web.json_response(result.model_dump(mode="json"))
        await response.prepare(request)
        await response.write_eof()  # written before the server that carries it is closed
        on_paired(result)
        return response

    app = web.Application(client_max_size=MAX_PAIRING_BODY, middlewares=[_errors])
    app[SERVICE] = service
    p = API_PREFIX
    app.router.add_routes([
        web.get(f"{p}/pairing", pairing_info),
        web.post(f"{p}/pairing/challenge", pairing_challenge),
        web.post(f"{p}/pairing/complete", pairing_complete),     # body: PairingComplete
    ])
    return app
