"""The real daemon for the app's tests: built from its composition root in a temporary home, on a
loopback port, in a thread with its own event loop (as in its own process: the test's qasync loop
neither blocks it nor runs its tasks). No local agent: a test that needs models uses the daemon
harness (``tests/daemon/harness.py``); this is for what the daemon answers by itself (keys,
settings, the audit log, saved chats)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.api.models import GpuInfo
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition, RequestRecord
from daemon.config import DaemonConfig
from daemon.deps import DaemonDeps, build_deps
from daemon.nodes.monitor import NodePolicy
from daemon.nodes.store import NodeRecord
from daemon.paths import DaemonPaths
from daemon.server import start_server

_LOGGER = logging.getLogger(__name__)
_T = TypeVar("_T")
WORKSTATION = "c" * 64  # the node ``hold_models`` places models on


class RealDaemon(tuple[str, str]):
    """``(url, admin token)``; a test that sets up what no route can (a key's use, the request log, a
    job) reaches the daemon's parts (``deps``) on its own loop with ``call``."""

    deps: DaemonDeps
    loop: asyncio.AbstractEventLoop
    agents: list[Any]  # the in-process agents ``add_node`` started; closed with the daemon

    def call(self, work: Callable[[DaemonDeps], Coroutine[Any, Any, _T] | _T]) -> _T:
        """``work(deps)`` run on the daemon's loop (awaited if it is a coroutine); its result."""

        async def run() -> _T:
            done = work(self.deps)
            return await done if asyncio.iscoroutine(done) else done  # type: ignore[return-value]

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def hold_models(self, *definitions: ModelDefinition) -> list[ModelDefinition]:
        """The daemon's models, exactly ``definitions`` (stopped), as saved; placed on a node it has paired
        ("workstation", never reached: this daemon has no local agent) unless they name their own."""

        async def hold(deps: DaemonDeps) -> list[ModelDefinition]:
            if WORKSTATION not in deps.nodes.names():
                await deps.nodes.store.put(NodeRecord(id=WORKSTATION, name="workstation", host="10.0.0.2",
                                                      port=9443, certificate_pem=""))
            for held in deps.registry.all():
                await deps.registry.remove(held.id)
            return [await deps.registry.add(d if "node" in d.model_fields_set else
                                            d.model_copy(update={"node": WORKSTATION})) for d in definitions]

        return self.call(hold)

    def agent_home(self, name: str) -> Path:
        """Where ``add_node(name)`` keeps its agent's files: beside this daemon's home, and its own (two
        daemons of one session, in two modules, each pair an agent of that name)."""
        return self.deps.paths.home.parent / f"{self.deps.paths.home.name}-agent-{name}"

    def add_node(self, name: str, gpus: list[GpuInfo] | None = None, *, paired: bool = True,
                 llama_server: Path | None = None, **agent: Any) -> str:
        """A real agent in the daemon's process (``tests/fleet/inprocess.py``: its GPU probe reports
        ``gpus``, its runtime is ``llama_server`` if given; ``agent``: its other seams, as
        ``memory_probe``, ``service_manager``, ``docker_socket``), paired through the admin API unless
        ``paired`` is false (then it waits, as a new machine on the LAN does); the node's id once online
        (its address when not paired)."""
        from tests.fakes.ports import free_port_block
        from tests.fleet.agents import eventually
        from tests.fleet.inprocess import start_inprocess_agent

        async def add(deps: DaemonDeps) -> str:
            home = self.agent_home(name)
            started = await start_inprocess_agent(home, name=name, gpus=gpus, llama_server=llama_server,
                                                  first_port=free_port_block(20), **agent)
            self.agents.append(started)
            if not paired:
                return started.address
            pairing = await started.said("pairing")
            client = DaemonClient(*self)
            try:
                node = await client.pair_node(started.address, pairing["code"], pairing["fingerprint"])
            finally:
                await client.close()
            await eventually(lambda: (link := deps.links.get(node.id)) is not None and link.online,
                             what=f"the node {name} online")
            return str(node.id)

        return self.call(add)

    def served(self, *records: RequestRecord) -> None:
        """``records`` in the daemon's access log, as if its router had served them."""

        async def note(deps: DaemonDeps) -> None:
            for record in records:
                deps.history.record_request(record)
            await deps.history.flush()

        self.call(note)


@contextmanager
def daemon_in_thread(home: Path, llama_server: Path | None = None, port: int = 0,
                     probe_interval_s: float | None = None) -> Iterator[RealDaemon]:
    """``(url, admin token)`` of a real daemon serving until the block ends; with ``llama_server`` (a
    runtime, e.g. the fake one of ``tests/conftest.py``) it runs its local agent too, as the daemon
    harness (``tests/daemon/harness.py``) does, and its models stop at the end. ``port``: where it
    listens (0: any free port; a given one, for a daemon that stops and starts again there).
    ``probe_interval_s``: its ``[nodes] interval_s`` (a node that goes away is offline after three
    missed probes: 6 s at the default 2 s, for a test that waits on that)."""
    policy = NodePolicy(discovery=False, **({} if probe_interval_s is None else {"interval_s": probe_interval_s}))
    up: concurrent.futures.Future[RealDaemon] = concurrent.futures.Future()
    held: dict[str, object] = {}

    def ready(daemon: DaemonDeps) -> None:
        found = RealDaemon((f"http://127.0.0.1:{daemon.config.port}", daemon.admin_token))
        found.deps, found.loop, found.agents = daemon, asyncio.get_running_loop(), []
        held["found"] = found
        up.set_result(found)

    async def close_agents() -> None:
        found = held.get("found")
        agents = getattr(found, "agents", [])
        if agents:  # the daemon's long-polls end first, else each agent's server waits for its own
            from daemon.nodes.links import NodeLink

            for link in list(found.deps.links):  # type: ignore[union-attr]
                if isinstance(link, NodeLink):
                    await link.stop()
            await asyncio.gather(*(agent.close() for agent in agents))

    async def serve() -> None:
        stop = asyncio.Event()
        held["loop"], held["stop"] = asyncio.get_running_loop(), stop
        if llama_server is not None:
            from tests.daemon.harness import running_daemon

            async with running_daemon(home, llama_server, nodes=policy,
                                      port=port) as running:
                ready(running.daemon)
                await stop.wait()
                await close_agents()
            return
        config = DaemonConfig(port=port, ollama_port=None, local_agent=False, seed_demo_model=False,
                              nodes=policy)
        daemon = build_deps(config, DaemonPaths(home))
        runner = await start_server(daemon)
        try:
            ready(daemon)
            await stop.wait()
        finally:
            await close_agents()
            await runner.cleanup()

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=asyncio.DefaultEventLoopPolicy().new_event_loop) as runner:
                runner.run(serve())
        except BaseException as exc:
            if not up.done():
                up.set_exception(exc)
            raise

    thread = threading.Thread(target=run, name="real-daemon", daemon=True)
    thread.start()
    try:
        yield up.result(timeout=60)
    finally:
        loop, stop = held.get("loop"), held.get("stop")
        if isinstance(loop, asyncio.AbstractEventLoop) and isinstance(stop, asyncio.Event):
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)


@contextmanager
def daemon_with_workstation(root: Path, gpus: list[GpuInfo] | None = None, port: int = 0,
                            **switches: object) -> Iterator[RealDaemon]:
    """A real daemon (no local agent) with one node, "workstation": a real in-process agent whose GPU
    probe reports ``gpus`` and whose runtime is the fake llama-server with ``switches`` (its fault
    switches, ``tests/fakes``). ``on_workstation(daemon, id)`` defines a model there (a tiny GGUF);
    ``fresh(daemon, ...)`` resets the daemon between tests."""
    from tests.fakes import write_fake_runtime
    from tests.fakes.gguf_files import gguf_bytes

    root.mkdir(parents=True, exist_ok=True)
    (root / "tiny.gguf").write_bytes(gguf_bytes())
    with daemon_in_thread(root / "home", port=port) as found:
        found.gguf = root / "tiny.gguf"  # type: ignore[attr-defined]
        found.workstation = found.add_node(  # type: ignore[attr-defined]
            "workstation", gpus, llama_server=write_fake_runtime(root / "runtime", **switches))

        async def reported(deps: DaemonDeps) -> None:  # its first figures (and GPUs) are in
            from tests.fleet.agents import eventually

            await eventually(lambda: any(h.node == found.workstation and len(h.gpus) == len(gpus or [])  # type: ignore[attr-defined]
                                         and h.memory_total for h in deps.telemetry.hosts()), what="the workstation's figures")

        found.call(reported)
        try:
            yield found
        finally:
            fresh(found)


def on_workstation(daemon: RealDaemon, model_id: str, *, node: str | None = None, **fields: Any) -> ModelDefinition:
    """A model served as its id, of ``daemon_with_workstation``'s tiny GGUF, on its workstation (or ``node``)."""
    return ModelDefinition.model_validate({"id": model_id, "served_name": model_id, "model_path": str(daemon.gguf),  # type: ignore[attr-defined]
                                           "node": node or daemon.workstation, **fields})  # type: ignore[attr-defined]


@asynccontextmanager
async def app_client(daemon: RealDaemon, *definitions: ModelDefinition) -> AsyncIterator[DaemonClient]:
    """The app's client of ``daemon``, closed at the end; with ``definitions``, the daemon reset to
    just those first (``fresh``)."""
    if definitions:
        fresh(daemon, *definitions)
    client = DaemonClient(*daemon, client_name="app")
    try:
        yield client
    finally:
        await client.close()


def alpha_and_beta(daemon: RealDaemon) -> tuple[ModelDefinition, ModelDefinition]:
    """The window tests' two models on the workstation: alpha, and beta served as "Beta-7B"."""
    return (on_workstation(daemon, "alpha", tags=["chat"]),
            on_workstation(daemon, "beta", served_name="Beta-7B", tags=["code", "chat"]))


def fresh(daemon: RealDaemon, *definitions: ModelDefinition) -> list[ModelDefinition]:
    """The daemon as a test starts from: every model stopped, then exactly ``definitions`` (stopped);
    no API keys; the default settings (LAN access off)."""
    from daemon.api.models import DaemonSettings

    async def reset(deps: DaemonDeps) -> None:
        for held in deps.registry.all():
            try:
                await deps.orchestrator.stop(held.id)
            except Exception as exc:  # noqa: BLE001 - a model on a node that is gone: nothing runs
                _LOGGER.debug("no stop of %s: %s", held.id, exc)
        for key in deps.keys.list():
            deps.keys.revoke(key.id)
        client = DaemonClient(*daemon)
        try:
            await client.put_settings(DaemonSettings(lan_access=False, require_api_keys=False))
        finally:
            await client.close()

    daemon.call(reset)
    return daemon.hold_models(*definitions)


def ask(daemon: RealDaemon, work: Callable[[DaemonClient], Coroutine[Any, Any, _T]]) -> _T:
    """``work(client)`` with an admin client of ``daemon``, on its loop (a test's own set-up or check,
    never the app's client): e.g. ``ask(daemon, lambda c: c.get_model("alpha"))``."""

    async def run(_deps: DaemonDeps) -> _T:
        client = DaemonClient(*daemon)
        try:
            return await work(client)
        finally:
            await client.close()

    return daemon.call(run)


@contextmanager
def _hub_env(hub: Any, home: Path) -> Iterator[None]:
    """``HF_ENDPOINT`` at ``hub`` and ``HF_HOME`` under ``home``, no token, until the block ends."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_ENDPOINT", hub.hub_url)
        env.setenv("HF_HOME", str(home / "hf-home"))
        env.delenv("HF_TOKEN", raising=False)
        yield


@contextmanager
def fake_hub_for(daemon: RealDaemon, home: Path) -> Iterator[Any]:
    """The fake Hugging Face hub (``tests/fakes/fake_hf_hub.py``) on ``daemon``'s loop, asked by the
    daemon and by its in-process agents (``HF_ENDPOINT``; ``HF_HOME`` under ``home``) until the block ends."""
    from tests.fakes.fake_hf_hub import FakeHub

    hub = daemon.call(lambda _deps: FakeHub().start())
    try:
        with _hub_env(hub, home):
            yield hub
    finally:
        daemon.call(lambda _deps: hub.close())


def gpu_node(daemon: RealDaemon, root: Path, name: str, gpus: list[GpuInfo], *, memory_gib: tuple[int, int] = (64, 48),
             **agent: Any) -> str:
    """``add_node`` with the fake llama-server as its runtime (so its plan offers the GPUs its probe
    reports) and ``memory_gib`` (total, available) of system memory; the node's id."""
    from tests.fakes import write_fake_runtime
    from tests.fakes.fake_memory import FakeMemoryProbe

    total, available = memory_gib
    return daemon.add_node(name, gpus, llama_server=write_fake_runtime(root / f"runtime-{name}"),
                           memory_probe=FakeMemoryProbe(total=total << 30, available=available << 30), **agent)


def host_services_node(daemon: RealDaemon, name: str = "gpu-box") -> tuple[str, Any]:
    """(node id, its service manager): a real agent paired with ``daemon`` whose service manager is the
    tests' systemd in memory (``tests/fakes/services.py``: ssh, dbus, docker, ollama stopped, nginx...,
    and the NVIDIA persistence daemon and Open WebUI, running) and whose own ``services.json``
    whitelists docker, the NVIDIA persistence daemon and ollama. ``reset_host_services`` puts both
    back as they started."""
    from tests.fakes.services import FakeServiceManager

    manager = FakeServiceManager()
    daemon.agent_home(name).mkdir(parents=True, exist_ok=True)
    (daemon.agent_home(name) / "services.json").write_text('{"allow": ["docker", "nvidia-persistenced", "ollama"]}')
    node = daemon.add_node(name, service_manager=manager)
    reset_host_services(daemon, manager)
    return node, manager


def reset_host_services(daemon: RealDaemon, manager: Any) -> None:
    """The units of ``host_services_node`` as they started, and the daemon's whitelist: Open WebUI on
    every node (its ``services.json``, through the admin API)."""
    from daemon.api.services import ServiceNames
    from tests.fakes.services import FakeServiceManager, FakeUnit, default_units

    fresh = FakeServiceManager([*default_units(), FakeUnit("nvidia-persistenced.service", "NVIDIA Persistence Daemon",
                                                           running=True),
                                FakeUnit("open-webui.service", "Open WebUI", running=True)])
    manager.units, manager.calls, manager.failing = fresh.units, [], {}
    (daemon.deps.paths.home / "services.json").unlink(missing_ok=True)

    async def allow(_deps: DaemonDeps) -> None:
        client = DaemonClient(*daemon)
        try:
            await client.set_services_policy(ServiceNames(allow=["open-webui"]))
        finally:
            await client.close()

    daemon.call(allow)


@contextmanager
def hub_in_thread(home: Path) -> Iterator[Any]:
    """The fake Hugging Face hub (``tests/fakes/fake_hf_hub.py``) serving from a thread of its own, with
    ``HF_ENDPOINT`` pointing at it (and ``HF_HOME`` under ``home``) until the block ends: up before a
    daemon whose local agent, a child process, inherits them (``daemon_on_a_machine``)."""
    from tests.fakes.fake_hf_hub import FakeHub

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-hub", daemon=True)
    thread.start()
    hub = asyncio.run_coroutine_threadsafe(FakeHub().start(), loop).result(30)
    try:
        with _hub_env(hub, home):
            yield hub
    finally:
        asyncio.run_coroutine_threadsafe(hub.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def daemon_on_a_machine(root: Path) -> Iterator[RealDaemon]:
    """A real daemon with its local agent (the fake llama-server) on a machine of its own under
    ``root``: the agent's home folder is ``root/user`` (LM Studio's ``~/.lmstudio/models`` is under it)
    and Ollama's store ``root/ollama`` (``OLLAMA_MODELS``), so what a test puts there is what the
    agent finds. Inside ``hub_in_thread`` its downloads come from the fake hub."""
    from tests.fakes import write_fake_runtime

    (root / "user").mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOME", str(root / "user"))  # the agent child's; restored once it is up
        env.setenv("OLLAMA_MODELS", str(root / "ollama"))
        with daemon_in_thread(root / "home", write_fake_runtime(root / "runtime")) as found:
            env.undo()
            yield found


class HeldTuning:
    """Tuning runs the test moves along, in the real daemon's job manager (``held_tuning``): a started
    run holds where the real one measures (a whole run of the fake runtime takes half a minute; of a
    vLLM model it needs a Docker engine and a GPU); ``advance`` publishes its progress as the run's own
    ``ctx.publish`` does, ``finish`` ends it with a result that the manager stores and publishes."""

    def __init__(self, daemon: RealDaemon) -> None:
        self.daemon = daemon
        self.started: list[str] = []  # the ids of the tuning jobs started, oldest first
        self._runs: dict[str, tuple[Any, Any, asyncio.Future[Any]]] = {}

    async def run(self, ctx: Any, job: Any, definition: ModelDefinition, request: Any, hint: Any) -> Any:
        self.started.append(job.id)
        ending: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._runs[job.id] = (ctx, job, ending)
        from daemon.api.jobs import JobState

        job.state, job.phase = JobState.RUNNING, "measuring"
        return await ending

    async def _run_of(self, job_id: str) -> tuple[Any, Any, asyncio.Future[Any]]:
        """The held run of ``job_id``, once the manager has entered it (it asks the agent first)."""
        while job_id not in self._runs:
            await asyncio.sleep(0.01)  # on the daemon's loop: the job's task gets there in a few steps
        return self._runs[job_id]

    def advance(self, job_id: str, **changes: Any) -> None:
        async def move(_deps: DaemonDeps) -> None:
            ctx, job, _ = await self._run_of(job_id)
            for name, value in changes.items():
                setattr(job, name, value)
            ctx.publish()

        self.daemon.call(move)

    def finish(self, job_id: str, result: Any) -> None:
        """The run ends with ``result`` (its model and stamp become the job's)."""
        async def end(_deps: DaemonDeps) -> None:
            _, job, ending = await self._run_of(job_id)
            ending.set_result(result.model_copy(update={"model": job.model, "stamp": job.stamp}))

        self.daemon.call(end)


@contextmanager
def held_tuning(daemon: RealDaemon) -> Iterator[HeldTuning]:
    """Within the block every tuning job ``daemon`` starts (its route, its job manager, its maintenance
    window, its store and events: all real) runs as ``HeldTuning`` moves it."""
    from daemon.jobs import manager

    held = HeldTuning(daemon)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manager, "run_tune", held.run)
        yield held


def models_only(daemon: RealDaemon, *definitions: ModelDefinition) -> None:
    """The daemon's models, exactly ``definitions`` as they are (their own node: no node is added, unlike
    ``hold_models``); each model held before is stopped first (it may be running on the local agent)."""

    async def hold(deps: DaemonDeps) -> None:
        for held in deps.registry.all():
            try:
                await deps.orchestrator.stop(held.id)
            except Exception as exc:  # noqa: BLE001 - it was not running
                _LOGGER.debug("no stop of %s: %s", held.id, exc)
            await deps.registry.remove(held.id)
        for definition in definitions:
            await deps.registry.add(definition)

    daemon.call(hold)


# --- the Benchmarks tab's and the tuning wizard's daemon (test_app_benchmarks_vm/_gui) -----------------
def benchmark_result(model: str, stamp: str, started_at: float, **metrics: float) -> Any:
    """A benchmark run as the daemon stores it."""
    from daemon.api.jobs import BenchmarkResult

    return BenchmarkResult(model=model, stamp=stamp, started_at=started_at, finished_at=started_at + 30,
                           metrics=metrics, duration_s=30)


def tuning_result(model: str, stamp: str, *, winner: bool) -> Any:
    """A llama.cpp tuning run whose winner (threads=2) confirmed 28 % better than the saved threads=4."""
    import time

    from agent.api.llamacpp import LlamaCppSettings
    from daemon.api.jobs import CandidateResult, TuningResult

    saved, best = LlamaCppSettings(threads=4), LlamaCppSettings(threads=2)
    base_metrics = {"single_tps": 40.0, "top_agg_tps": 100.0, "long_ttft_ms": 500.0}
    best_metrics = {"single_tps": 60.0, "top_agg_tps": 110.0, "long_ttft_ms": 400.0}
    candidates = [CandidateResult(index=0, step="baseline", settings=saved, score=1.0, metrics=base_metrics),
                  CandidateResult(index=1, step="threads", settings=best, score=1.3, metrics=best_metrics,
                                  effective_config="threads=2")]
    confirmation = [CandidateResult(index=0, step="confirmation", settings=saved, score=1.0, score_min=0.98,
                                    score_max=1.02, metrics=base_metrics),
                    CandidateResult(index=1, step="confirmation", settings=best, score=1.28, score_min=1.25,
                                    score_max=1.31, metrics=best_metrics)]
    return TuningResult(model=model, stamp=stamp, started_at=time.time(), saved_settings=saved,
                        candidates=candidates, confirmation=confirmation if winner else [],
                        winner=1 if winner else None, winner_settings=best if winner else None,
                        gain=1.28 if winner else None,
                        decision="#1 beats the baseline by 28.0 %" if winner else "no change: nothing beat it")


@contextmanager
def benchmarks_daemon(root: Path, **switches: object) -> Iterator[RealDaemon]:
    """A real daemon with its local agent and the fake llama-server (a token every 10 ms, so a run's
    progress is seen; ``switches`` more), alpha (a tiny GGUF, threads=4) defined: ``.alpha``."""
    from agent.api.llamacpp import LlamaCppSettings
    from tests.fakes import write_fake_runtime
    from tests.fakes.gguf_files import gguf_bytes

    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / "alpha.gguf").write_bytes(gguf_bytes(extra={"tokenizer.chat_template": "{{ messages }}"}))
    runtime = write_fake_runtime(root / "runtime", **{"token_delay_s": 0.01, **switches})
    with daemon_in_thread(root / "home", runtime) as found:
        found.alpha = ModelDefinition(id="alpha", served_name="alpha",  # type: ignore[attr-defined]
                                      model_path=str(root / "models" / "alpha.gguf"),
                                      settings=LlamaCppSettings(threads=4))
        found.call(lambda deps: deps.registry.add(found.alpha))  # type: ignore[attr-defined]
        yield found


async def benchmarks_client(daemon: RealDaemon) -> DaemonClient:
    """The app's client of ``benchmarks_daemon``, set as a test starts: alpha running with its saved
    settings, no stored runs (the caller closes it)."""
    import shutil

    from daemon.api.models import ModelState

    def forget(deps: DaemonDeps) -> None:
        for folder in ("benchmarks", "tuning"):
            shutil.rmtree(deps.jobs.store.home / folder, ignore_errors=True)

    daemon.call(forget)
    client = DaemonClient(*daemon, client_name="app")
    alpha: ModelDefinition = daemon.alpha  # type: ignore[attr-defined]
    if (await client.get_model("alpha")).definition.settings != alpha.settings:
        await client.update_model(alpha)
    if (await client.get_model("alpha")).status.state != ModelState.READY:
        await client.start_model("alpha", wait=True)
    return client


def stored_runs(daemon: RealDaemon, *results: Any) -> None:
    """``results`` in the daemon's job store, as finished runs leave them."""
    daemon.call(lambda deps: [deps.jobs.store.save(r) for r in results])


def chat(daemon: RealDaemon, model: str, text: str = "hello") -> None:
    """One chat request to ``daemon``'s /v1 for ``model``, answered (a runtime that logs requests logs it)."""
    import aiohttp

    async def send(_deps: DaemonDeps) -> None:
        async with aiohttp.ClientSession() as session, session.post(
                f"{daemon[0]}/v1/chat/completions", json={"model": model, "max_tokens": 4,
                                                          "messages": [{"role": "user", "content": text}]}) as r:
            assert r.status == 200, await r.text()

    daemon.call(send)


def plant_history(daemon: RealDaemon, model_id: str, rows: list[dict[str, float | None]]) -> list[float]:
    """``rows`` in ``daemon``'s history of ``model_id`` as if its telemetry had sampled them, one per 2 s
    (the 5-minute chart's step), ending now; their times."""
    import time

    end = time.time() // 2 * 2
    times = [end - 2 * (len(rows) - i) for i in range(len(rows))]

    async def add(deps: DaemonDeps) -> None:
        for ts, row in zip(times, rows, strict=True):
            await deps.history.add_samples("model", ts, {model_id: row})

    daemon.call(add)
    return times
