"""The helper's rpc-servers: one ``ggml-rpc-server`` per grant, on 127.0.0.1 only.

``RpcServers.start`` checks the memory the grant lends (on the named GPUs, else system memory),
picks a free loopback port (``agent.runtimes.ports``), starts the catalog's ``ggml-rpc-server``
with ``-H 127.0.0.1 -p PORT`` (and ``-d``/``-t`` from the request) in its own session with its log
in ``logs/rpc-<grant>.log``, and answers once the port takes a connection. The grant is open while
the server runs: ``allows`` is what the peer gate and the tunnel ask. ``stop`` (DELETE), the
server's own exit and the agent's shutdown close the grant and every tunnel through it.

rpc-servers are not adopted by a later agent: a split model cannot outlive the agents that carry
its RPC. The agent records their PIDs (``rpc-servers.json``) and a new agent stops any that an
agent killed outright left running (``reap_leftovers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from agent.admission import MemoryProbe
from agent.api.llamacpp import device_names
from agent.api.rpc import RpcServerInfo, RpcServerRequest, RpcServerState
from agent.gpu import GpuProbe
from agent.logring import LogRing, LogTailer
from agent.paths import AgentPaths
from agent.problems import AgentProblem, InsufficientMemory
from agent.runtimes.catalog import RuntimeCatalog
from agent.runtimes.llamacpp import API_KEY_ENV, child_env
from agent.runtimes.ports import LOOPBACK, find_free_port
from agent.runtimes.process import RuntimeProcess, describe_exit
from core.json_store import write_json_atomic

_LOGGER = logging.getLogger(__name__)

RPC_FIRST_PORT = 50052  # llama.cpp's own default rpc-server port; a free one from here, loopback only
READY_TIMEOUT_S = 30.0
READY_POLL_S = 0.05
STOP_TIMEOUT_S = 5.0
RECORDS_FILE = "rpc-servers.json"


class NoRpcServer(AgentProblem):
    status = 503
    code = "no_rpc_server"


class UnknownGrant(AgentProblem):
    status = 404
    code = "grant_not_found"


class GrantConflict(AgentProblem):
    status = 409
    code = "grant_conflict"


class RpcServerFailed(AgentProblem):
    status = 502
    code = "rpc_server_failed"


@dataclass
class _Server:
    request: RpcServerRequest
    state: RpcServerState
    devices: list[str]
    port: int | None = None
    process: RuntimeProcess | None = None
    tailer: LogTailer | None = None
    ring: LogRing = field(default_factory=LogRing)
    started_at: float | None = None
    error: str | None = None
    watcher: asyncio.Task[None] | None = None
    tunnels: set[Callable[[], object]] = field(default_factory=set)  # each closes one open tunnel

    def info(self) -> RpcServerInfo:
        lines = self.tailer.lines(20) if self.tailer is not None else []
        return RpcServerInfo(grant_id=self.request.grant_id, peer_node_id=self.request.peer_node_id,
                             state=self.state, pid=self.process.pid if self.process else None, port=self.port,
                             devices=self.devices, memory_bytes=self.request.memory_bytes,
                             started_at=self.started_at, error=self.error,
                             last_log_lines=lines if self.state is RpcServerState.FAILED else [])


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


async def _accepts(port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection(LOOPBACK, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class RpcServers:
    """Every grant this (helper) node holds, and its rpc-server."""

    def __init__(self, paths: AgentPaths, catalog: RuntimeCatalog, memory: MemoryProbe, gpus: GpuProbe,
                 taken_ports: Callable[[], Iterable[int]] = tuple, first_port: int = RPC_FIRST_PORT) -> None:
        self.paths = paths
        self.catalog = catalog
        self.memory = memory
        self.gpus = gpus
        self.taken_ports = taken_ports
        self.first_port = first_port
        self._servers: dict[str, _Server] = {}
        self._lock = asyncio.Lock()

    @property
    def records_file(self) -> Path:
        return self.paths.home / RECORDS_FILE

    def executable(self) -> str | None:
        exe = self.catalog.rpc_server()
        return str(exe.path) if exe is not None else None

    def list(self) -> list[RpcServerInfo]:
        return [s.info() for s in self._servers.values()]

    def info(self, grant_id: str) -> RpcServerInfo:
        return self._get(grant_id).info()

    def _get(self, grant_id: str) -> _Server:
        server = self._servers.get(grant_id)
        if server is None:
            raise UnknownGrant(f"no rpc-server for grant {grant_id!r} on this node")
        return server

    def allows(self, grant_id: str, node_id: str) -> bool:
        """Whether ``node_id`` may tunnel to ``grant_id``'s rpc-server now."""
        server = self._servers.get(grant_id)
        return (server is not None and server.state is RpcServerState.READY
                and server.request.peer_node_id == node_id)

    def tunnel_port(self, grant_id: str, node_id: str) -> int | None:
        server = self._servers.get(grant_id)
        if server is None or not self.allows(grant_id, node_id):
            return None
        return server.port

    def add_tunnel(self, grant_id: str, close: Callable[[], object]) -> bool:
        """Register an open tunnel's closer, so closing the grant ends it; False when it is closed."""
        server = self._servers.get(grant_id)
        if server is None or server.state is not RpcServerState.READY:
            return False
        server.tunnels.add(close)
        return True

    def remove_tunnel(self, grant_id: str, close: Callable[[], object]) -> None:
        server = self._servers.get(grant_id)
        if server is not None:
            server.tunnels.discard(close)

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
            known = self._servers.get(request.grant_id)
            if known is not None and known.state is RpcServerState.READY:
                if known.request.peer_node_id != request.peer_node_id:
                    raise GrantConflict(f"grant {request.grant_id!r} is open for another node")
                return known.info()
            exe = self.catalog.rpc_server()
            if exe is None:
                raise NoRpcServer("this node's llama.cpp has no ggml-rpc-server: roll out a build with RPC "
                                  "(make runtime) to lend its memory to a model on another node")
            await self._check_memory(request)
            taken = [*self.taken_ports(), *(s.port for s in self._servers.values()
                                            if s.port is not None and s.state is RpcServerState.READY)]
            port = await asyncio.to_thread(find_free_port, taken, self.first_port)
            server = _Server(request=request, state=RpcServerState.READY, devices=devices_for(request), port=port)
            argv = [str(exe.path), *build_rpc_args(request, port)]
            gpu_env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if request.gpus else {}
            env = child_env(gpu_env, "", exe.library_dir)
            env.pop(API_KEY_ENV, None)
            log_path = self.paths.logs_dir / f"rpc-{request.grant_id}.log"
            self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
            log_path.unlink(missing_ok=True)
            try:
                process = RuntimeProcess.spawn(argv, env, log_path, cwd=self.paths.home)
            except OSError as exc:
                raise NoRpcServer(f"cannot start {exe.path}: {exc}") from exc
            server.process, server.started_at = process, time.time()
            server.tailer = LogTailer(log_path, server.ring)
            server.tailer.start()
            self._servers[request.grant_id] = server
            self._record()
            _LOGGER.info("rpc-server for grant %s: pid %d on %s:%d", request.grant_id, process.pid, LOOPBACK, port)
            try:
                await self._wait_listening(server)
            except RpcServerFailed:
                await self._close(server, RpcServerState.FAILED)
                raise
            server.watcher = asyncio.create_task(self._watch(server), name=f"rpc-server {request.grant_id}")
            return server.info()

    async def _wait_listening(self, server: _Server) -> None:
        assert server.process is not None and server.port is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not await _accepts(server.port):
            if server.process.poll():
                code = await server.process.wait()
                if server.tailer is not None:
                    server.tailer.flush()
                lines = server.tailer.lines(20) if server.tailer else []
                server.error = f"ggml-rpc-server {describe_exit(code)} before it listened"
                raise RpcServerFailed(server.error, details={"last_log_lines": lines})
            if time.monotonic() > deadline:
                server.error = f"ggml-rpc-server did not listen within {READY_TIMEOUT_S:.0f} s"
                raise RpcServerFailed(server.error)
            await asyncio.sleep(READY_POLL_S)

    async def _watch(self, server: _Server) -> None:
        assert server.process is not None
        code = await server.process.wait()
        if server.state is RpcServerState.READY:
            server.error = f"ggml-rpc-server {describe_exit(code)}"
            _LOGGER.warning("rpc-server for grant %s: %s", server.request.grant_id, server.error)
            await self._close(server, RpcServerState.FAILED)

    async def _close(self, server: _Server, state: RpcServerState) -> None:
        """Close the grant: no new tunnel, the open ones ended, the process stopped."""
        server.state = state
        for close in list(server.tunnels):
            close()
        server.tunnels.clear()
        if server.process is not None:
            await server.process.terminate(STOP_TIMEOUT_S)
        if server.tailer is not None:
            server.tailer.flush()
            await server.tailer.stop()
        watcher, server.watcher = server.watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self._record()

    async def stop(self, grant_id: str) -> RpcServerInfo:
        """Stop a grant's rpc-server (DELETE): the grant closes with it."""
        async with self._lock:
            server = self._get(grant_id)
            if server.state is RpcServerState.READY:
                await self._close(server, RpcServerState.STOPPED)
                _LOGGER.info("rpc-server for grant %s stopped", grant_id)
            elif server.state is RpcServerState.FAILED:  # acknowledged: stopped now
                server.state = RpcServerState.STOPPED
            return server.info()

    async def close(self) -> None:
        """The agent is going away: every rpc-server stops (none is adopted later)."""
        async with self._lock:
            for server in self._servers.values():
                if server.state is RpcServerState.READY:
                    await self._close(server, RpcServerState.STOPPED)

    def _record(self) -> None:
        live = [{"pid": s.process.pid, "create_time": s.process.create_time,
                 "executable": s.process.executable()}
                for s in self._servers.values()
                if s.process is not None and s.state is RpcServerState.READY]
        write_json_atomic(self.records_file, live, mode=0o644)

    def reap_leftovers(self) -> int:
        """Stop the rpc-servers an earlier agent recorded and left running; how many were."""
        try:
            records = json.loads(self.records_file.read_text())
        except (OSError, ValueError):
            return 0
        reaped = 0
        for rec in records if isinstance(records, list) else []:
            try:
                proc = psutil.Process(int(rec["pid"]))
                same = (abs(proc.create_time() - float(rec["create_time"])) < 1.0
                        and (rec.get("executable") is None or proc.exe() == rec["executable"]))
                if same:
                    proc.kill()
                    reaped += 1
            except (psutil.Error, KeyError, TypeError, ValueError):
                continue
        self.records_file.unlink(missing_ok=True)
        if reaped:
            _LOGGER.warning("stopped %d rpc-server(s) an earlier agent left running", reaped)
        return reaped
