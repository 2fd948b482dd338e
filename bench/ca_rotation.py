"""How long a CA rotation takes, and whether a node's calls fail meanwhile.

A daemon (in this process) with N agents as separate processes on loopback (``python -m agent``),
each paired; then R rotations one after another (each a whole one: new CA, every node switched, the
old CA retired). While each runs, every node is asked for its status in a loop through the daemon's
links, as the monitor and the router would. Printed per rotation: the time the client waited, the
daemon's own figure, each node's switch, and the status calls made and failed meanwhile.

    .venv/bin/python bench/ca_rotation.py [--agents N] [--rotations R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _harness import ROOT

sys.path.insert(0, str(ROOT))
os.environ["MIRBADLLM_NO_MDNS"] = "1"
from agent.api.client import AgentError
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fleet.agents import AgentProcess, spawn_agent


async def _hammer(rd: RunningDaemon, nodes: list[str], done: asyncio.Event) -> tuple[int, int]:
    calls = failed = 0
    while not done.is_set():
        for node in nodes:
            calls += 1
            try:
                await rd.daemon.links[node].client.status()
            except AgentError:
                failed += 1
    return calls, failed


async def main(agents: int, rotations: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="ca-rotation-bench-"))
    started: list[AgentProcess] = []
    try:
        for i in range(agents):
            started.append(await spawn_agent(home / f"agent-{i}", name=f"node-{i}", llama_server=None))
        async with running_daemon(home / "daemon", None, local_agent=False,
                                  nodes={"interval_s": 1.0, "probe_timeout_s": 5.0}) as rd:
            nodes = []
            for agent in started:
                node = await rd.client.pair_node(agent.address, agent.code, agent.fingerprint)
                nodes.append(node.id)
            totals = []
            for r in range(rotations):
                done = asyncio.Event()
                load = asyncio.ensure_future(_hammer(rd, nodes, done))
                began = time.perf_counter()
                result = await rd.client.rotate_ca()
                took = time.perf_counter() - began
                done.set()
                calls, failed = await load
                totals.append(took)
                per_node = ", ".join(f"{n.name} {n.seconds * 1000:.0f} ms" for n in result.nodes)
                print(f"rotation {r + 1}: {took * 1000:.0f} ms (daemon {result.seconds * 1000:.0f} ms; {per_node}); "
                      f"retired={result.retired}; status calls meanwhile: {calls}, failed: {failed}")
            print(f"{agents} agents, {rotations} rotations: median {statistics.median(totals) * 1000:.0f} ms, "
                  f"max {max(totals) * 1000:.0f} ms")
    finally:
        for agent in started:
            await agent.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--rotations", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.agents, args.rotations))
