"""The demo: the real daemon in this process, with demo agents, for ``mirbadllm --demo`` and the screenshots.

``demo_fleet()`` builds the daemon from its composition root (``daemon.deps``) in a temporary home,
on a loopback port of its own (no Ollama port, no LAN discovery), with its real local agent (this
machine as it is, the demo model when the ``demo`` extra is installed). Two more real agents run in
this process (``agent.lifecycle``) with a made-up GPU each (the GPU probe is their one fake seam)
and are paired through the admin API; a third waits to be paired. The fleet is then seeded through
``DaemonClient`` only, so what the pages show comes from the daemon itself: API keys, the demo
model ready and answering a few requests, more models of its file (one that fails to start, with
its runtime's own words; one starting, then ready, on a node; one stopped on the other), a saved
chat. Everything ends with the context: models stopped, agents closed, the home removed.

``python -m mirbadllm.demo --screenshots OUT`` writes the screenshots (``app.screenshots``) against
it; ``make screenshots`` runs that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import random
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.api.models import GpuInfo
from agent.api.program import program_version
from agent.inprocess import InProcessAgent
from agent.runtimes.ports import port_is_free
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.conversations import ConversationCreate, ConversationMessage
from daemon.api.mirror import MirrorQuery
from daemon.api.models import ApiKeyLimits, ModelState
from daemon.config import DaemonConfig
from daemon.deps import build_deps
from daemon.nodes.monitor import NodePolicy
from daemon.paths import DaemonPaths
from daemon.server import start_server

_LOGGER = logging.getLogger(__name__)

GIB = 2**30


@dataclass
class DemoNode:
    """An agent of the demo: its name, its GPUs (what its probe reports), whether it gets paired."""

    name: str
    gpus: list[GpuInfo]
    paired: bool = True


NODES = (
    DemoNode("gpu-box", [GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-demo-4090",
                                 memory_total=24 * GIB, memory_used=int(15.2 * GIB), utilization_percent=58,
                                 temperature_c=64)]),
    DemoNode("mac-studio", [GpuInfo(index=0, name="NVIDIA RTX A6000", uuid="GPU-demo-a6000", memory_total=48 * GIB,
                                    memory_used=int(9.5 * GIB), utilization_percent=12, temperature_c=47),
                            GpuInfo(index=1, name="NVIDIA RTX A6000", uuid="GPU-demo-a6000-2",
                                    memory_total=48 * GIB, memory_used=2 * GIB, utilization_percent=0,
                                    temperature_c=39)]),
    DemoNode("spare-laptop", [], paired=False),  # waits to be paired: the Nodes page offers it
)


class DemoGpus:
    """The demo agents' GPU probe: the GPUs it was given (agent.gpu's ``GpuProbe``)."""

    def __init__(self, gpus: list[GpuInfo]) -> None:
        self.gpus = gpus

    def sample(self) -> list[GpuInfo]:
        return [gpu.model_copy() for gpu in self.gpus]


def _port_block(size: int = 20) -> int:
    """A first port whose next ``size`` are free: the demo's runtimes never meet a real agent's (18080)."""
    bases = list(range(30000, 40000, 50))
    random.shuffle(bases)
    return next(b for b in bases if all(port_is_free(p) for p in range(b, b + size)))


async def _start_agent(home: Path, node: DemoNode, llama_server: str | None) -> InProcessAgent:
    return await InProcessAgent.start(home, name=node.name, version=program_version(), llama_server=llama_server,
                                      telemetry_interval_s=1.0, gpu_probe=DemoGpus(node.gpus),
                                      first_port=_port_block())


async def _seed(client: DaemonClient, agents: list[tuple[DemoNode, InProcessAgent]]) -> Coroutine[Any, Any, None] | None:
    """What the demo shows, made through the admin API as a user would; returns the part that waits on
    the demo model (its start and a few answers), for the caller to await or run beside the app."""
    for node, agent in agents:
        pairing = await agent.said("pairing")
        if node.paired:
            await client.pair_node(agent.address, pairing["code"], pairing["fingerprint"])
        else:
            await client.add_node_address(agent.address)
    demo = next(iter(await client.list_models()), None)  # the demo model (the `demo` extra)
    created = await client.create_key("laptop")
    await client.create_key("open-webui")
    await client.set_key_limits(created.info.id, ApiKeyLimits(requests_per_minute=60, tokens_per_day=200_000))
    if demo is None:
        return None
    # More models of the demo's one file (the nodes run on this machine and read it where it is):
    # one that cannot start (a flag its runtime refuses: it fails, with the runtime's own words) and
    # one on each node, stopped.
    base = demo.definition
    nodes = {n.name: n.id for n in await client.list_nodes()}
    more = [base.model_copy(update={"id": "gemma-3-270m-broken", "served_name": "gemma3-broken", "auto_start": False,
                                    "tags": ["chat", "broken"],
                                    "extra_args": ["--override-kv", "tokenizer.ggml.add_bos_token=yes"]})]
    more += [base.model_copy(update={"id": f"gemma-3-270m-{name}", "served_name": f"gemma3-{name}", "node": node,
                                     "auto_start": False, "tags": ["chat", name]})
             for name, node in nodes.items() if name in {n.name for n in NODES}]
    for definition in more:
        try:
            await client.create_model(definition)
        except DaemonError as exc:  # the rest of the demo goes on
            _LOGGER.warning("demo: could not add %s: %s", definition.id, exc.message)
    with contextlib.suppress(DaemonError):
        await client.start_model("gemma-3-270m-broken")
    if "mac-studio" in nodes:  # a real push of the demo's file to a node: the Downloads page's transfer
        with contextlib.suppress(DaemonError):
            await client.mirror(MirrorQuery(model_id=base.id, target_node=nodes["mac-studio"], register_model=False))
    return _answer_some(client, base.id, base.served_name, created.key)


async def _answer_some(client: DaemonClient, model_id: str, served_name: str, key: str) -> None:
    """Start the demo model and ask it a few things through /v1: the Requests page and the charts."""
    try:
        status = await client.start_model(model_id, wait=True)
    except DaemonError as exc:
        _LOGGER.warning("demo: the demo model did not start: %s", exc.message)
        return
    if status.state != ModelState.READY:
        return
    prompts = ("Say hello in French.", "What is 2 + 2?")
    url = f"{client.base_url}/v1/chat/completions"
    for prompt in prompts:
        body = {"model": served_name, "max_tokens": 12, "messages": [{"role": "user", "content": prompt}]}
        with contextlib.suppress(Exception):
            async with client.session.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as answer:
                await answer.read()
    with contextlib.suppress(DaemonError):  # one on a paired node too: starting while the pictures are taken
        await client.start_model(f"{model_id}-{NODES[0].name}")
    await client.create_conversation(ConversationCreate(
        title="Why run models locally?", model=served_name,
        messages=[ConversationMessage(role="user", content="In two sentences: why run models locally?"),
                  ConversationMessage(role="assistant", content="Your prompts and data never leave your "
                                      "machines, and there is no per-token bill or rate limit.")]))


@dataclass
class RunningFleet:
    url: str
    token: str
    home: Path


async def _run_fleet(settled: bool, llama_server: str | None, up: Callable[[RunningFleet], None],
                     stop: asyncio.Event) -> None:
    """The daemon and the agents in this thread's loop, from start until ``stop``."""
    with tempfile.TemporaryDirectory(prefix="mirbadllm-demo-") as tmp:
        root = Path(tmp)
        config = DaemonConfig(port=0, ollama_port=None, seed_demo_model=True, telemetry_interval_s=1.0,
                              history_interval_s=1.0, runtime_first_port=_port_block(), local_agent_retry_max_s=0.2,
                              llama_server=llama_server, nodes=NodePolicy(discovery=False))
        daemon = build_deps(config, DaemonPaths(root / "home"))
        runner = await start_server(daemon)
        seeder = DaemonClient(f"http://127.0.0.1:{daemon.config.port}", daemon.admin_token, client_name="demo")
        agents: list[tuple[DemoNode, InProcessAgent]] = []
        answering: asyncio.Task[None] | None = None
        try:
            link = daemon.links.get("local")
            if link is not None:
                await asyncio.wait_for(link.first_sync.wait(), 60)
            for node in NODES:
                agents.append((node, await _start_agent(root / "nodes" / node.name, node, llama_server)))
            rest = await _seed(seeder, agents)
            if rest is not None and settled:
                await rest
            elif rest is not None:
                answering = asyncio.ensure_future(rest)
            up(RunningFleet(seeder.base_url, daemon.admin_token, daemon.paths.home))
            await stop.wait()
        finally:
            if answering is not None:
                answering.cancel()
            for definition in daemon.registry.all():  # runtimes outlive a daemon by design: not the demo's
                with contextlib.suppress(Exception):
                    await daemon.orchestrator.stop(definition.id)
            await seeder.close()
            await runner.cleanup()
            for _node, agent in agents:
                with contextlib.suppress(Exception):  # the rest still close
                    await agent.close()


@asynccontextmanager
async def demo_fleet(*, settled: bool = False, llama_server: str | None = None,
                     ) -> AsyncIterator[tuple[DaemonClient, Path]]:
    """The running demo: a ``DaemonClient`` of the real daemon (as the app, in its audit log) and its
    home. ``settled``: only once the demo model has answered (the screenshots); else that goes on
    while the app opens. The fleet runs in a thread of its own with its own loop, as the daemon would
    in its own process: the app's loop (inside Qt's) neither blocks it nor runs its tasks."""
    started: concurrent.futures.Future[RunningFleet] = concurrent.futures.Future()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        holder["loop"], holder["stop"] = asyncio.get_running_loop(), asyncio.Event()
        await _run_fleet(settled, llama_server, started.set_result, holder["stop"])

    def run() -> None:
        try:  # a plain loop of the platform's (the policy is qasync's in the app)
            with asyncio.Runner(loop_factory=asyncio.DefaultEventLoopPolicy().new_event_loop) as runner:
                runner.run(serve())
        except BaseException as exc:  # the app's side hears why the demo did not start
            if not started.done():
                started.set_exception(exc)
            _LOGGER.exception("the demo fleet failed")

    thread = threading.Thread(target=run, name="demo-fleet", daemon=True)
    thread.start()
    try:
        fleet = await asyncio.wrap_future(started)
        client = DaemonClient(fleet.url, fleet.token, client_name="app")
        try:
            yield client, fleet.home
        finally:
            await client.close()
    finally:
        if "loop" in holder:
            holder["loop"].call_soon_threadsafe(holder["stop"].set)
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 60)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--screenshots"]:
        from app.screenshots import main as shots

        return shots(args[1:], functools.partial(demo_fleet, settled=True))
    from app.main import main as run_app

    return run_app(args if "--demo" in args else ["--demo", *args], demo=demo_fleet)


if __name__ == "__main__":
    sys.exit(main())
