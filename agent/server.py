"""The agent's HTTP app: ``create_app(deps)`` with one route table, the routes of ``AgentClient``.

Every error is ``{"error": {"code", "message", "details"}}``, answered by the one middleware of
``agent.problems`` (the parts' own exceptions translated by ``_known``). Background work (adopting
recorded runtimes, telemetry, the proxy's session) lives in ``cleanup_ctx``. ``start_server`` runs
the app with the settings the proxy relies on (handler cancellation when a client disconnects).
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import psutil
from aiohttp import web
from pydantic import ValidationError

from agent.api.models import API_PREFIX, AgentStatus, InstanceState, LaunchSpec
from agent.api.sources import FitRequest
from agent.deps import AgentDeps
from agent.files.api import routes as files_routes
from agent.files.folder import ModelFolder, read_by_instances
from agent.identity import AgentIdentity
from agent.manager import AlreadyRunning, UnknownInstance
from agent.pairing.enrollment import daemon_pin_file
from agent.problems import AgentProblem, errors_middleware
from agent.proxy import RuntimeConnections, UpstreamUnreachable, forward
from agent.rpc import api as rpc_api
from agent.rpc.peers import PeerPolicy, peer_gate, read_pins
from agent.rpc.servers import RpcServers
from agent.runtimes.llamacpp import NoRuntime, SpecRejected
from agent.runtimes.rollout import LlamaCppBuilds
from agent.runtimes.rollout import routes as runtime_build_routes
from agent.services.api import routes as services_routes
from agent.services.service import HostServices
from agent.sources.api import routes as sources_routes
from agent.sources.mirror import MirrorReceiver
from agent.sources.mirror import routes as mirror_routes
from agent.sources.service import ModelSources
from agent.trust import TrustTarget
from agent.trust import routes as trust_routes
from agent.upgrade import AgentUpgrades
from agent.upgrade import routes as upgrade_routes
from core.key_store import at_rest
from core.tasks import cancel_and_wait

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")

DEPS = web.AppKey("deps", AgentDeps)
PROXY_CONNECTIONS = web.AppKey("proxy_connections", RuntimeConnections)
MAX_BODY = 64 * 1024 * 1024
MAX_LONG_POLL_S = 300.0
SSE_KEEPALIVE_S = 15.0


def _known(exc: Exception) -> AgentProblem | None:
    """The agent's parts' own exceptions, as the problems they answer."""
    if isinstance(exc, UnknownInstance):
        return AgentProblem(f"no instance {exc.args[0]!r} on this agent", status=404, code="instance_not_found")
    if isinstance(exc, AlreadyRunning):
        return AgentProblem(str(exc), status=409, code="already_running")
    if isinstance(exc, SpecRejected):
        return AgentProblem(str(exc), status=422, code="spec_rejected")
    if isinstance(exc, NoRuntime):
        return AgentProblem(str(exc), status=503, code="no_runtime")
    if isinstance(exc, UpstreamUnreachable):
        return AgentProblem(str(exc), status=502, code="runtime_unreachable")
    return None


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise AgentProblem(f"query parameter {name} must be a number, not {raw!r}", status=400,
                           code="bad_request") from None
    return min(max(value, low), high)


async def status(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    loop = asyncio.get_running_loop()
    total, available = await loop.run_in_executor(None, deps.memory_probe.memory)  # as admission and grants see it
    gpus = await loop.run_in_executor(None, deps.gpu_probe.sample)
    body = AgentStatus(node_id=deps.identity.node_id, hostname=socket.gethostname(), os=platform.system(),
                       arch=platform.machine(), version=deps.version, cpu_count=psutil.cpu_count() or 1,
                       memory_total=total, memory_available=available, gpus=gpus,
                       runtimes=deps.catalog.runtimes(), runtime_offers=await deps.manager.drivers.offers(),
                       features=deps.features, keys_at_rest=at_rest([deps.identity.paths.key_file]))
    body.rpc_server = deps.rpc.executable() if deps.rpc is not None else None
    return web.json_response(body.model_dump(mode="json"))


async def list_instances(request: web.Request) -> web.Response:
    manager = request.app[DEPS].manager
    if "since" not in request.query:
        return web.json_response(manager.page().model_dump(mode="json"))
    since = int(_number(request, "since", 0, -1, 2**62))
    timeout = _number(request, "timeout", 0, 0, MAX_LONG_POLL_S)
    page = await manager.wait_page(since, timeout)
    return web.json_response(page.model_dump(mode="json"))


async def get_instance(request: web.Request) -> web.Response:
    info = request.app[DEPS].manager.info(request.match_info["id"])
    return web.json_response(info.model_dump(mode="json"))


async def start_instance(request: web.Request) -> web.Response:
    try:
        spec = LaunchSpec.model_validate(await request.json())
    except (ValidationError, ValueError) as exc:
        raise AgentProblem(f"not a valid launch spec: {exc}", status=422, code="spec_rejected") from exc
    info = await request.app[DEPS].manager.start(spec)
    return web.json_response(info.model_dump(mode="json"), status=202)


async def plan_model(request: web.Request) -> web.Response:
    """Every way a model runs on this node, best first (``agent.placement``)."""
    try:
        req = FitRequest.model_validate(await request.json())
    except (ValidationError, ValueError) as exc:
        raise AgentProblem(f"not a valid FitRequest: {exc}", status=422, code="invalid_request") from exc
    return web.json_response((await _sources(request).plan(req)).model_dump(mode="json"))


async def stop_instance(request: web.Request) -> web.Response:
    timeout = _number(request, "timeout", 10.0, 0, 600)
    info = await request.app[DEPS].manager.stop(request.match_info["id"], timeout)
    return web.json_response(info.model_dump(mode="json"))


async def instance_logs(request: web.Request) -> web.StreamResponse:
    ring = request.app[DEPS].manager.get(request.match_info["id"]).logs
    tail = int(_number(request, "tail", 200, 0, 100_000))
    follow = request.query.get("follow", "0") not in ("0", "", "false")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    position = ring.total
    await _send_lines(response, ring.tail(tail))
    while follow:
        try:
            await asyncio.wait_for(ring.wait_beyond(position), SSE_KEEPALIVE_S)
        except TimeoutError:
            await response.write(b": keepalive\n\n")
            continue
        lines, position = ring.since(position), ring.total
        await _send_lines(response, lines)
    await response.write_eof()
    return response


async def _send_lines(response: web.StreamResponse, lines: list[str]) -> None:
    if lines:
        await response.write("".join(f"data: {json.dumps(line)}\n\n" for line in lines).encode())


async def telemetry(request: web.Request) -> web.Response:
    since = int(_number(request, "since", 0, 0, 2**62))
    return web.json_response(request.app[DEPS].telemetry.page(since).model_dump(mode="json"))


async def proxy(request: web.Request) -> web.StreamResponse:
    sup = request.app[DEPS].manager.get(request.match_info["id"])
    run = sup.run
    if run is None or sup.state is not InstanceState.READY:
        raise AgentProblem(f"instance {sup.instance_id} is {sup.state.value}", status=503, code="instance_not_ready")
    return await forward(request, run, request.match_info["path"], request.app[PROXY_CONNECTIONS])


async def unpair(request: web.Request) -> web.StreamResponse:
    """The daemon removed this node: answer, then reset the identity and wait to be paired again."""
    on_unpair = _present(request.app[DEPS].on_unpair, 409, "cannot_unpair",
                         "this agent is not run by `mirbadllm agent`; stop it instead")
    response = web.json_response({"status": "unpairing"}, status=202)
    await response.prepare(request)
    await response.write_eof()  # sent before the server that carries it closes
    on_unpair()
    return response


async def _adoption(app: web.Application) -> AsyncIterator[None]:
    deps = app[DEPS]
    if deps.adopt_on_start:
        adopted = await deps.manager.adopt_recorded()
        if adopted:
            _LOGGER.info("adopted running instances: %s", ", ".join(adopted))
    yield
    await deps.manager.close()
    if deps.sources is not None:
        await deps.sources.close()  # running transfers are cancelled and leave no partial files


async def _end_long_polls(app: web.Application) -> None:
    """A stop (an upgrade's restart, SIGTERM) answers the daemon's long-polls at once: the runner would
    otherwise wait for them, up to its shutdown timeout, before the agent exits."""
    deps = app[DEPS]
    await deps.manager.end_polls()
    if deps.sources is not None:
        await deps.sources.transfers.end_polls()


async def _warm_offers(app: web.Application) -> AsyncIterator[None]:
    """Learn what each runtime offers once at start (a build's fingerprint, ``--version``, the vLLM
    image's version), so the first status probes answer from the drivers' caches, not after it."""
    async def warm() -> None:
        try:
            await app[DEPS].manager.drivers.offers()
        except Exception:  # a status probe asks again and reports what fails
            _LOGGER.exception("could not learn the runtimes' offers at start")

    task = asyncio.create_task(warm(), name="warm-offers")
    yield
    await cancel_and_wait(task)


async def _telemetry(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[DEPS].telemetry.run(), name="telemetry")
    yield
    await cancel_and_wait(task)


async def _proxy_connections(app: web.Application) -> AsyncIterator[None]:
    app[PROXY_CONNECTIONS] = connections = RuntimeConnections()
    yield
    await connections.close()


def _present(part: T | None, status: int, code: str, message: str) -> T:
    """An optional part of ``AgentDeps``, or the refusal that says this agent runs without it."""
    if part is None:
        raise AgentProblem(message, status=status, code=code)
    return part


def _sources(request: web.Request) -> ModelSources:
    return _present(request.app[DEPS].sources, 503, "no_sources",
                    "this agent was built without downloads and admission")


def _upgrades(request: web.Request) -> AgentUpgrades:
    return _present(request.app[DEPS].upgrades, 409, "upgrade_unsupported",
                    "this agent is not run by `mirbadllm agent`; upgrade it by hand")


def _runtime_builds(request: web.Request) -> LlamaCppBuilds:
    return _present(request.app[DEPS].runtime_builds, 409, "runtime_upgrade_unsupported",
                    "this agent takes no rolled-out llama.cpp builds")


def _services(request: web.Request) -> HostServices:
    return _present(request.app[DEPS].services, 503, "service_manager_unavailable",
                    "this agent was built without host services")


def _rpc(request: web.Request) -> RpcServers:
    return _present(request.app[DEPS].rpc, 503, "no_rpc", "this agent was built without rpc-servers")


def _peer_gate(deps: AgentDeps, policy: PeerPolicy) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The daemon reaches everything; another node only a grant's RPC tunnel (agent.rpc.peers)."""
    rpc = deps.rpc
    return peer_gate(policy, rpc_api.tunnel_route(API_PREFIX),
                     rpc.allows if rpc is not None else lambda _grant, _node: False)


def _trust_target(deps: AgentDeps, policy: PeerPolicy) -> TrustTarget:
    def set_identity(identity: AgentIdentity) -> None:
        deps.identity = identity  # the status reports the new certificate's id

    return TrustTarget(lambda: deps.identity, set_identity, lambda: deps.tls, policy)


def create_app(deps: AgentDeps) -> web.Application:
    policy = PeerPolicy(read_pins(daemon_pin_file(deps.paths)))
    app = web.Application(client_max_size=MAX_BODY, middlewares=[errors_middleware(_known), _peer_gate(deps, policy)])
    app[DEPS] = deps
    p = API_PREFIX
    app.router.add_routes([
        web.get(f"{p}/status", status),
        web.get(f"{p}/instances", list_instances),                  # ?since=VERSION&timeout=S
        web.get(f"{p}/instances/{{id}}", get_instance),
        web.post(f"{p}/instances", start_instance),                 # body: LaunchSpec
        web.post(f"{p}/instances/{{id}}/stop", stop_instance),      # ?timeout=S
        web.get(f"{p}/instances/{{id}}/logs", instance_logs),       # ?tail=N&follow=0|1
        web.get(f"{p}/telemetry", telemetry),                       # ?since=SEQ
        web.route("*", f"{p}/proxy/{{id}}/{{path:.*}}", proxy),     # any method, streamed
        *sources_routes(p, _sources),                               # fit, downloads, imports: agent.sources.api
        web.post(f"{p}/plan", plan_model),                          # body: FitRequest -> NodePlan (agent.placement)
        web.post(f"{p}/unpair", unpair),                            # then waits to be paired again
        *trust_routes(p, _trust_target(deps, policy)),              # POST /trust: new CAs and certificate (agent.trust)
        *upgrade_routes(p, _upgrades),                              # POST /upgrade: agent.upgrade, then exit 75
        *runtime_build_routes(p, _runtime_builds),                  # POST /runtimes/llamacpp: agent.runtimes.rollout
        *mirror_routes(p, MirrorReceiver(deps.paths.models_dir)),   # GET|PUT|DELETE /mirror/{name}, POST /mirror: agent.sources.mirror
        *files_routes(p, ModelFolder(deps.paths.models_dir, lambda: read_by_instances(deps.manager))),  # GET|DELETE /files: agent.files
        *services_routes(p, _services),                             # GET /services, POST /services/{name}/{action}: agent.services
        *rpc_api.routes(p, _rpc),                                   # /rpc/servers, /rpc/{grant}/tunnel: agent.rpc.api
    ])
    app.on_shutdown.append(_end_long_polls)
    app.cleanup_ctx.extend([_adoption, _warm_offers, _telemetry, _proxy_connections])
    app.cleanup_ctx.append(rpc_api.cleanup(lambda a: a[DEPS].rpc))  # every rpc-server stops with the agent
    return app


async def start_server(app: web.Application, host: str, port: int,
                       ssl_context: ssl.SSLContext | None) -> tuple[web.AppRunner, int]:
    """Serve ``app``; the runner (``await runner.cleanup()`` to stop) and the bound port."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    # The only way to learn the port when port=0 was asked for.
    sockets = getattr(site._server, "sockets", None) or []
    return runner, int(sockets[0].getsockname()[1]) if sockets else port
