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
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

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

    def add_node(self, name: str, gpus: list[GpuInfo] | None = None, *, paired: bool = True,
                 llama_server: Path | None = None, **agent: Any) -> str:
        """A real agent in the daemon's process (``tests/fleet/inprocess.py``: its GPU probe reports
        ``gpus``, its runtime is ``llama_server`` if given; ``agent``: its other seams, as
        ``memory_probe``, ``service_manager``, ``docker_socket``), paired through the admin API unless
        ``paired`` is false (then it waits, as a new machine on the LAN does); the node's id once online
        (its address when not paired)."""
        from tests.fleet.agents import eventually
        from tests.fleet.inprocess import start_inprocess_agent

        async def add(deps: DaemonDeps) -> str:
            home = deps.paths.home.parent / f"agent-{name}"
            started = await start_inprocess_agent(home, name=name, gpus=gpus, llama_server=llama_server,
                                                  first_port=43000 + 200 * len(self.agents), **agent)
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
def daemon_in_thread(home: Path, llama_server: Path | None = None) -> Iterator[RealDaemon]:
    """``(url, admin token)`` of a real daemon serving until the block ends; with ``llama_server`` (a
    runtime, e.g. the fake one of ``tests/conftest.py``) it runs its local agent too, as the daemon
    harness (``tests/daemon/harness.py``) does, and its models stop at the end."""
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

            async with running_daemon(home, llama_server, nodes=NodePolicy(discovery=False)) as running:
                ready(running.daemon)
                await stop.wait()
                await close_agents()
            return
        config = DaemonConfig(port=0, ollama_port=None, local_agent=False, seed_demo_model=False,
                              nodes=NodePolicy(discovery=False))
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
