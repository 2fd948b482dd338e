"""The helper's rpc-servers: one ``ggml-rpc-server`` per grant, on 127.0.0.1 only.

``RpcServers.start`` checks the memory the grant lends (on the named GPUs, else system memory),
picks a free loopback port (``agent.runtimes.ports``), starts the catalog's ``ggml-rpc-server``
with ``-H 127.0.0.1 -p PORT`` (and ``-d``/``-t`` from the request) in its own session with its log
in ``logs/rpc-<grant>.log``, and answers once the port takes a connection. The process is a model's
kin: an ``InstanceSupervisor`` (``agent.supervisor``) runs and watches it (states, log ring, the
lifecycle task; its ``wait_ready`` is "the port accepts a connection") and ``processes.json``
(``agent.records``, runtime ``"rpc"``) records it. This module is the grant layer above: the grant is
open while the server is ready; ``allows`` is what the peer gate and the tunnel ask. ``stop``
(DELETE), the server's own exit and the agent's shutdown close the grant and every tunnel through it.

rpc-servers are not adopted by a later agent: a split model cannot outlive the agents that carry
its RPC. A new agent stops any that an agent killed outright left running (``reap_leftovers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiohttp
import psutil

from agent.admission import MemoryProbe
from agent.api.llamacpp import device_names
from agent.api.models import InstanceState
from agent.api.rpc import RpcServerInfo, RpcServerRequest, RpcServerState
from agent.gpu import GpuProbe
from agent.logring import LogRing, LogTailer
from agent.paths import AgentPaths
from agent.problems import AgentProblem, InsufficientMemory
from agent.records import RPC_RUNTIME, ProcessRecord, ProcessRecords, find_live_process
from agent.runtimes.catalog import RuntimeCatalog, RuntimeExecutable
from agent.runtimes.llamacpp import API_KEY_ENV, child_env
from agent.runtimes.ports import LOOPBACK, find_free_port
from agent.runtimes.process import RuntimeProcess
from agent.runtimes.run import RuntimeRun
from agent.supervisor import InstanceSupervisor

_LOGGER = logging.getLogger(__name__)

RPC_FIRST_PORT = 50052  # llama.cpp's own default rpc-server port; a free one from here, loopback only
READY_TIMEOUT_S = 30.0  # silence before it listens (``RuntimeRun.wait_ready``)
STOP_TIMEOUT_S = 5.0
LEFTOVER_WAIT_S = 5.0  # how long a new agent waits for the rpc-servers it killed to be gone
RUNTIME_NAME = "ggml-rpc-server"
# The supervisor's state as the wire names it: starting is the grant being opened (POST answers once
# it is ready or failed), stopping is its closing.
_WIRE_STATE = {InstanceState.STARTING: RpcServerState.READY, InstanceState.READY: RpcServerState.READY,
               InstanceState.FAILED: RpcServerState.FAILED, InstanceState.STOPPING: RpcServerState.STOPPED,
               InstanceState.STOPPED: RpcServerState.STOPPED}


class NoRpcServer(AgentProblem, status=503, code="no_rpc_server"):
    pass


class UnknownGrant(AgentProblem, status=404, code="grant_not_found"):
    pass


class GrantConflict(AgentProblem, status=409, code="grant_conflict"):
    pass


class RpcServerFailed(AgentProblem, status=502, code="rpc_server_failed"):
    pass


def record_id(grant_id: str) -> str:
    """A grant's key in ``processes.json`` (``:`` is in no instance id: never a model's)."""
    return f"{RPC_RUNTIME}:{grant_id}"


@dataclass
class _Grant:
    request: RpcServerRequest
    supervisor: InstanceSupervisor
    devices: list[str]
    tunnels: set[Callable[[], object]] = field(default_factory=set)  # each closes one open tunnel

    @property
    def open(self) -> bool:
        return self.supervisor.state is InstanceState.READY

    def info(self) -> RpcServerInfo:
        sup = self.supervisor.info()
        return RpcServerInfo(grant_id=self.request.grant_id, peer_node_id=self.request.peer_node_id,
                             state=_WIRE_STATE[sup.state], pid=sup.pid, port=sup.port, devices=self.devices,
                             memory_bytes=self.request.memory_bytes, started_at=sup.started_at, error=sup.error,
                             last_log_lines=sup.last_log_lines if sup.state is InstanceState.FAILED else [])


def devices_for(request: RpcServerRequest) -> list[str]:
    """``-d``'s devices: the named GPUs as CUDA devices, [] as the CPU, None as rpc-server's choice."""
    if request.gpus is None:
        return []
    return device_names(request.gpus).split(",") if request.gpus else ["CPU"]


def build_rpc_args(request: RpcServerRequest, port: int) -> list[str]:
    """ggml-rpc-server's argv after the executable: loopback only, always."""
    argv = ["-H", LOOPBACK, "-p", str(port)]
    devices = devices_for(request)
    if devices:
        argv += ["-d", ",".join(devices)]
    if request.threads is not None:
        argv += ["-t", str(request.threads)]
    return argv


async def _accepts(run: RuntimeRun, _session: aiohttp.ClientSession) -> bool:
    """An rpc-server's readiness: its loopback port takes a connection."""
    try:
        _reader, writer = await asyncio.open_connection(LOOPBACK, run.port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _wait_ready(run: RuntimeRun, session: aiohttp.ClientSession, startup_timeout_s: float) -> None:
    await run.wait_ready(session, startup_timeout_s, _accepts)


class RpcServers:
    """Every grant this (helper) node holds, and its rpc-server's supervisor."""

    def __init__(self, paths: AgentPaths, catalog: RuntimeCatalog, memory: MemoryProbe, gpus: GpuProbe,
                 records: ProcessRecords, session: Callable[[], aiohttp.ClientSession],
                 taken_ports: Callable[[], Iterable[int]] = tuple, first_port: int = RPC_FIRST_PORT) -> None:
        self.paths = paths
        self.catalog = catalog
        self.memory = memory
        self.gpus = gpus
        self.records = records
        self.session = session
        self.taken_ports = taken_ports
        self.first_port = first_port
        self._grants: dict[str, _Grant] = {}
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()

    def executable(self) -> str | None:
        exe = self.catalog.rpc_server()
        return str(exe.path) if exe is not None else None

    def list(self) -> list[RpcServerInfo]:
        return [g.info() for g in self._grants.values()]

    def info(self, grant_id: str) -> RpcServerInfo:
        return self._get(grant_id).info()

    def _get(self, grant_id: str) -> _Grant:
        grant = self._grants.get(grant_id)
        if grant is None:
            raise UnknownGrant(f"no rpc-server for grant {grant_id!r} on this node")
        return grant

    def allows(self, grant_id: str, node_id: str) -> bool:
        """Whether ``node_id`` may tunnel to ``grant_id``'s rpc-server now."""
        grant = self._grants.get(grant_id)
        return grant is not None and grant.open and grant.request.peer_node_id == node_id

    def tunnel_port(self, grant_id: str, node_id: str) -> int | None:
        run = self._grants[grant_id].supervisor.run if self.allows(grant_id, node_id) else None
        return run.port if run is not None else None

    def add_tunnel(self, grant_id: str, close: Callable[[], object]) -> bool:
        """Register an open tunnel's closer, so closing the grant ends it; False when it is closed."""
        grant = self._grants.get(grant_id)
        if grant is None or not grant.open:
            return False
        grant.tunnels.add(close)
        return True

    def remove_tunnel(self, grant_id: str, close: Callable[[], object]) -> None:
        grant = self._grants.get(grant_id)
        if grant is not None:
            grant.tunnels.discard(close)

    async def _check_memory(self, request: RpcServerRequest) -> None:
        wanted = request.memory_bytes
        if wanted is None:
            return
        if request.gpus:
            gpus = await asyncio.to_thread(self.gpus.sample)
            by_index = {g.index: g for g in gpus}
            missing = [i for i in request.gpus if i not in by_index]
            if missing:
                raise AgentProblem(f"this node has no GPU {missing[0]}", status=422, code="unknown_gpu")
            free = sum(max(0, by_index[i].memory_total - by_index[i].memory_used) for i in request.gpus)
            where = f"GPU {', '.join(str(i) for i in request.gpus)}"
        else:
            _total, free = await asyncio.to_thread(self.memory.memory)
            where = "system memory"
        if free < wanted:
            raise InsufficientMemory(f"this node has {free / 2**30:.1f} GiB free in {where}, not the "
                                     f"{wanted / 2**30:.1f} GiB this model's share needs",
                                     details={"free_bytes": free, "wanted_bytes": wanted, "where": where})

    async def start(self, request: RpcServerRequest) -> RpcServerInfo:
        """Start the grant's rpc-server and answer once it listens on loopback."""
        async with self._lock:
            known = self._grants.get(request.grant_id)
            if known is not None and known.open:
                if known.request.peer_node_id != request.peer_node_id:
                    raise GrantConflict(f"grant {request.grant_id!r} is open for another node")
                return known.info()
            exe = self.catalog.rpc_server()
            if exe is None:
                raise NoRpcServer("this node's llama.cpp has no ggml-rpc-server: roll out a build with RPC "
                                  "(make runtime) to lend its memory to a model on another node")
            await self._check_memory(request)
            taken = [*self.taken_ports(), *(g.supervisor.run.port for g in self._grants.values()
                                            if g.supervisor.run is not None)]
            port = await asyncio.to_thread(find_free_port, taken, self.first_port)
            sup = known.supervisor if known is not None else InstanceSupervisor(
                record_id(request.grant_id), self._on_change, self.session, _wait_ready)
            grant = _Grant(request=request, supervisor=sup, devices=devices_for(request))
            self._grants[request.grant_id] = grant
            started = await sup.spawn(lambda ring: self._launch(request, exe, port, ring),
                                      READY_TIMEOUT_S, served_name=f"rpc {request.grant_id}")
            if started.state is InstanceState.FAILED:  # it could not even be spawned
                del self._grants[request.grant_id]
                raise NoRpcServer(f"cannot start {exe.path}: {started.error}")
            async with self._changed:
                await self._changed.wait_for(lambda: sup.state is not InstanceState.STARTING)
            info = grant.info()
            if info.state is not RpcServerState.READY:
                raise RpcServerFailed(info.error or f"{RUNTIME_NAME} failed before it listened", details={"last_log_lines": info.last_log_lines})
            return info

    def _launch(self, request: RpcServerRequest, exe: RuntimeExecutable, port: int, ring: LogRing) -> RuntimeRun:
        """Spawn the grant's rpc-server (the supervisor's ``launch``), recorded as an rpc-server's (``rpc_server``)."""
        argv = [str(exe.path), *build_rpc_args(request, port)]
        gpu_env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if request.gpus else {}
        env = child_env(gpu_env, "", exe.library_dir)
        env.pop(API_KEY_ENV, None)
        log_path = self.paths.logs_dir / f"rpc-{request.grant_id}.log"
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        log_path.unlink(missing_ok=True)
        process = RuntimeProcess.spawn(argv, env, log_path, cwd=self.paths.home)
        _LOGGER.info("rpc-server for grant %s: pid %d on %s:%d", request.grant_id, process.pid, LOOPBACK, port)
        record = ProcessRecord(instance_id=record_id(request.grant_id), runtime=RPC_RUNTIME, rpc_server=True,
                               pid=process.pid, create_time=process.create_time, executable=str(exe.path), port=port,
                               api_key="", argv=argv, model_path="", served_name=f"rpc {request.grant_id}", config_hash="",
                               started_at=time.time(), startup_timeout_s=READY_TIMEOUT_S)
        return RuntimeRun(RUNTIME_NAME, process, record, LogTailer(log_path, ring))

    async def _on_change(self) -> None:
        """Any supervisor's transition: a grant no longer ready ends its tunnels; the records follow."""
        for grant in self._grants.values():
            if not grant.open and grant.tunnels:
                for close in list(grant.tunnels):
                    close()
                grant.tunnels.clear()
        self.records.save({record_id(i): g.supervisor.run.record for i, g in self._grants.items()
                           if g.supervisor.run is not None}, rpc=True)
        async with self._changed:
            self._changed.notify_all()

    async def stop(self, grant_id: str) -> RpcServerInfo:
        """Stop a grant's rpc-server (DELETE): the grant closes with it; a failed one is acknowledged."""
        async with self._lock:
            grant = self._get(grant_id)
            await grant.supervisor.stop(STOP_TIMEOUT_S)
            _LOGGER.info("rpc-server for grant %s stopped", grant_id)
            return grant.info()

    async def close(self) -> None:
        """The agent is going away: every rpc-server stops (none is adopted later)."""
        async with self._lock:
            for grant in self._grants.values():
                if grant.supervisor.busy:
                    await grant.supervisor.stop(STOP_TIMEOUT_S)

    def reap_leftovers(self) -> int:
        """Stop the rpc-servers an earlier agent recorded and left running; how many were."""
        killed: list[psutil.Process] = []
        for record in self.records.load(rpc=True).values():
            proc = find_live_process(record)
            if proc is not None:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
                    killed.append(proc)
        if killed:  # gone before this agent serves: their ports are free for the next grant
            _gone, alive = psutil.wait_procs(killed, timeout=LEFTOVER_WAIT_S)
            for proc in alive:
                _LOGGER.warning("rpc-server pid %d an earlier agent left running has not exited yet", proc.pid)
        self.records.save({}, rpc=True)
        if killed:
            _LOGGER.warning("stopped %d rpc-server(s) an earlier agent left running", len(killed))
        return len(killed)
