"""The ``RuntimeDriver`` seam: a hand-written minimal driver is all the manager needs.

``MinimalDriver`` knows nothing of llama.cpp's catalog, build checks or slots: it runs the fake
runtime (``tests/fakes/fake_llama_server.py``) with a command line of its own, calls it ready when
``/health`` answers 200 and reads one figure from its ``/metrics``. The manager, its supervisors
and the telemetry run it start -> ready -> stop, and adopt it after an agent restart.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil

from agent.api.models import InstanceState, LaunchSpec
from agent.api.runtimes import RuntimeOffer
from agent.logring import LogRing, LogTailer
from agent.manager import InstanceManager
from agent.paths import AgentPaths
from agent.records import ProcessRecord, ProcessRecords
from agent.runtimes.catalog import RuntimeCatalog
from agent.runtimes.driver import Figures, NoRuntime, RuntimeDriver, SpecRejected
from agent.runtimes.llamacpp import LlamaCppDriver
from agent.runtimes.process import RuntimeProcess
from agent.runtimes.prometheus import parse_prometheus
from agent.runtimes.run import RuntimeRun
from agent.telemetry import TelemetryCollector
from tests.agent._support import make_spec
from tests.fakes import FakeGpuProbe


class MinimalDriver:
    """A runtime driver in as few lines as the protocol allows."""

    runtime = "llamacpp"  # the runtime the specs name; the manager picks the driver by it
    runtime_name = "minimal-server"

    def __init__(self, exe: Path | None, paths: AgentPaths) -> None:
        self.exe = exe
        self.paths = paths
        self.ready_waits = 0

    async def offer(self) -> RuntimeOffer:
        return RuntimeOffer(runtime="llamacpp", available=self.exe is not None, location=str(self.exe))

    def build_command(self, spec: LaunchSpec, port: int) -> list[str]:
        return ["--alias", spec.served_name, "--host", "127.0.0.1", "--port", str(port)]

    def check(self, spec: LaunchSpec) -> None:
        if spec.extra_args:
            raise SpecRejected("the minimal runtime takes no extra arguments")
        if self.exe is None:
            raise NoRuntime("no minimal-server here")

    def launch(self, spec: LaunchSpec, port: int, ring: LogRing) -> RuntimeRun:
        assert self.exe is not None
        argv = [str(self.exe), *self.build_command(spec, port)]
        key = secrets.token_urlsafe(16)
        log = self.paths.instance_log(spec.instance_id)
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        tailer = LogTailer(log, ring)
        process = RuntimeProcess.spawn(argv, {"PATH": os.environ.get("PATH", ""), "LLAMA_API_KEY": key},
                                       log, cwd=self.paths.home)
        record = ProcessRecord(instance_id=spec.instance_id, pid=process.pid, create_time=process.create_time,
                               executable=str(self.exe), port=port, api_key=key, argv=argv,
                               model_path=spec.model_path, served_name=spec.served_name, config_hash="minimal",
                               started_at=time.time(), startup_timeout_s=spec.startup_timeout_s)
        return RuntimeRun(self.runtime_name, process, record, tailer)

    async def adopt(self, record: ProcessRecord, ring: LogRing) -> RuntimeRun | None:
        try:
            handle = psutil.Process(record.pid)
            if handle.create_time() != record.create_time:
                return None
        except psutil.Error:
            return None
        tailer = LogTailer(self.paths.instance_log(record.instance_id), ring, from_end=True)
        return RuntimeRun(self.runtime_name, RuntimeProcess.adopt(handle), record, tailer, adopted=True)

    async def wait_ready(self, run: RuntimeRun, session: aiohttp.ClientSession, startup_timeout_s: float) -> None:
        self.ready_waits += 1

        async def healthy(run: RuntimeRun, session: aiohttp.ClientSession) -> bool:
            try:
                async with session.get(f"{run.endpoint}/health") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await run.wait_ready(session, startup_timeout_s, healthy)

    def parse_metrics(self, text: str) -> Figures:
        return {"requests_processing": parse_prometheus(text).get("llamacpp:requests_processing")}

    async def scrape(self, run: RuntimeRun, session: aiohttp.ClientSession) -> Figures:
        async with session.get(f"{run.endpoint}/metrics", headers=run.auth_headers()) as resp:
            return self.parse_metrics(await resp.text()) if resp.status == 200 else {}


def _manager(driver: RuntimeDriver, paths: AgentPaths, port_base: int) -> InstanceManager:
    return InstanceManager(driver, ProcessRecords(paths.records_file), port_base)


async def _state(manager: InstanceManager, *states: InstanceState) -> InstanceState:
    await manager.wait_for(lambda: manager.info("m").state in states, 20.0)
    return manager.info("m").state


async def test_a_minimal_driver_runs_through_the_manager_start_ready_stop_and_adopt(
        tmp_path: Path, port_base: int, fake_runtime: Callable[..., Path], model_file: Path) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    driver = MinimalDriver(fake_runtime(), paths)
    manager = _manager(driver, paths, port_base)
    try:
        starting = await manager.start(make_spec(model_file))
        assert starting.state is InstanceState.STARTING and starting.port == port_base
        assert await _state(manager, InstanceState.READY, InstanceState.FAILED) is InstanceState.READY
        info = manager.info("m")
        assert info.argv == [str(driver.exe), "--alias", "m", "--host", "127.0.0.1", "--port", str(port_base)]
        assert driver.ready_waits == 1, "the supervisor waits through the driver's readiness"

        sample = await TelemetryCollector(manager, FakeGpuProbe()).collect()
        assert sample.instances["m"].requests_processing == 0, "the driver's metrics reach the sample"

        await manager.close()  # the agent goes away; the runtime keeps serving
        again = _manager(MinimalDriver(driver.exe, paths), paths, port_base)
        manager = again
        assert await again.adopt_recorded() == ["m"]
        assert await _state(again, InstanceState.READY, InstanceState.FAILED) is InstanceState.READY
        assert again.info("m").adopted is True and again.info("m").pid == info.pid

        stopped = await again.stop("m", timeout=5.0)
        assert stopped.state is InstanceState.STOPPED
        assert not psutil.pid_exists(info.pid or -1) or psutil.Process(info.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        for run in manager.runs().values():
            await run.terminate(1.0)
        await manager.close()


async def test_the_driver_refuses_before_a_port_is_taken(tmp_path: Path, port_base: int, model_file: Path) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    manager = _manager(MinimalDriver(None, paths), paths, port_base)
    try:
        for spec, error in ((make_spec(model_file, extra_args=["--x"]), SpecRejected),
                            (make_spec(model_file), NoRuntime)):
            try:
                await manager.start(spec)
            except error:
                pass
            else:
                raise AssertionError(f"{spec} was not refused with {error.__name__}")
        assert manager.page().instances == [], "a refused spec leaves no instance behind"
    finally:
        await manager.close()


def test_the_llama_cpp_driver_is_a_runtime_driver(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    driver: RuntimeDriver = LlamaCppDriver(paths, RuntimeCatalog(None, environ={"PATH": ""},
                                                                 distribution="no-such-distribution",
                                                                 runtime_roots=[]))
    assert (driver.runtime, driver.runtime_name) == ("llamacpp", "llama-server")


async def test_a_record_the_driver_cannot_adopt_is_dropped_and_leaves_no_instance(
        tmp_path: Path, port_base: int) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    records = ProcessRecords(paths.records_file)
    records.save({"gone": ProcessRecord(instance_id="gone", pid=os.getpid(), create_time=0.0, executable="x",
                                        port=port_base, api_key="k", argv=["x"], model_path="/m.gguf",
                                        served_name="gone", config_hash="h", started_at=0.0)})
    manager = InstanceManager(MinimalDriver(None, paths), records, port_base)
    try:
        assert await manager.adopt_recorded() == []
        assert manager.page().instances == []
        assert ProcessRecords(paths.records_file).load() == {}
    finally:
        await manager.close()


def test_the_manager_asks_the_profile_which_drivers_run_containers() -> None:
    """vLLM's driver is the container driver its profile says (image prepared, engine adopted); a
    native driver is never asked for container steps, whatever methods it has."""
    from agent.runtimes.driver import ContainerDriver, container_driver
    from agent.runtimes.vllm import VllmDriver

    steps = [name for name in vars(ContainerDriver) if not name.startswith("_")]
    assert all(callable(getattr(VllmDriver, name, None)) for name in steps), steps
    vllm = VllmDriver.__new__(VllmDriver)
    assert container_driver(vllm) is vllm
    native = MinimalDriver.__new__(MinimalDriver)
    native.discover = lambda: None  # type: ignore[attr-defined]  # a method of that name makes it no container
    assert container_driver(native) is None
