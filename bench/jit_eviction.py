"""What loading on demand costs when a model must first unload another: time to the first token of
a request for a stopped model when the node has room (a plain cold start), against the same request
when another model holds the room and is evicted first, side by side in one run.

Two definitions of the real Gemma 3 270M on this machine's llama-server, with memory budgets that
each fit but not together (as tests/e2e/test_evict_real_llama.py). Each round: every model stopped,
a request for A (cold start), then a request for B while A is ready (the daemon unloads A, starts B,
answers). Printed: the TTFT median of each, their ratio and difference, and how many evictions the
daemon recorded. Target: the eviction adds no more than the stop of the evicted model (ratio near 1).

    .venv/bin/python bench/jit_eviction.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp
from _harness import BenchDaemon, median, start_daemon, stream_chat

from daemon.api.demo_model import DEMO_MODEL_ID
from daemon.api.models import ModelState

GiB = 1024**3
SECOND = "gemma-3-270m-b"


def budget_gib(total: int, available: int) -> float:
    """A budget the agent admits while two of them claim more than the node has (as the e2e test)."""
    usable, half = (available - GiB) / GiB, (total - GiB) / GiB / 2
    if usable <= half + 0.5:
        raise SystemExit("this machine has less than half its memory free; the budgets would not be admitted")
    return round((usable + half) / 2, 2)


async def stop_all(d: BenchDaemon) -> None:
    for view in await d.client.list_models():
        if view.status.state != ModelState.STOPPED:
            await d.client.stop_model(view.definition.id)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=8)
    args = parser.parse_args()

    d = await start_daemon()
    try:
        deadline = time.monotonic() + 60
        while True:  # the local agent's first status report carries the memory figures
            [local] = [n for n in await d.client.list_nodes() if n.local]
            if local.memory_total is not None and local.memory_available is not None:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the local node reports no memory figures")
            await asyncio.sleep(0.5)
        budget = budget_gib(local.memory_total, local.memory_available)
        first = (await d.client.get_model(DEMO_MODEL_ID)).definition
        first = first.model_copy(update={"memory_budget_gib": budget, "auto_start": False,
                                         "start_on_request": True})
        await d.client.update_model(first)
        await d.client.create_model(first.model_copy(update={"id": SECOND, "served_name": SECOND, "tags": []}))
        print(f"two Gemma 3 270M models, {budget} GiB budget each, {local.memory_total / GiB:.1f} GiB on the node; "
              f"{args.rounds} rounds of {args.tokens} tokens")
        since = (await d.client.events(0, timeout=0)).last_id
        cold: list[float] = []
        evicting: list[float] = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            for n in range(args.rounds):
                await stop_all(d)
                started = time.perf_counter()
                a = await stream_chat(session, d.v1.removesuffix("/v1"), {}, DEMO_MODEL_ID, f"Hello ({n})", args.tokens)
                cold.append(a.ttft_s)
                b = await stream_chat(session, d.v1.removesuffix("/v1"), {}, SECOND, f"Hello ({n})", args.tokens)
                evicting.append(b.ttft_s)
                print(f"  round {n + 1}: cold {a.ttft_s * 1000:.0f} ms, evicting {b.ttft_s * 1000:.0f} ms "
                      f"({time.perf_counter() - started:.1f} s)")
        events = (await d.client.events(since, timeout=0)).events
        evictions = [e for e in events if e.type == "model.evicted"]
        c, e = median(cold), median(evicting)
        print(f"TTFT median: cold start {c * 1000:.0f} ms, with an eviction {e * 1000:.0f} ms; "
              f"ratio {e / c:.2f}, the eviction adds {(e - c) * 1000:.0f} ms; "
              f"{len(evictions)} evictions recorded for {args.rounds} requests")
    finally:
        await d.stop()


if __name__ == "__main__":
    asyncio.run(main())
