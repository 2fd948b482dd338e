"""What the /v1 router costs: the same requests sent straight to llama-server and through the daemon.

Interleaved batches, so both paths see the same machine state. Part 1 uses the real llama-server
with the Gemma 3 270M demo model (64 output tokens, 1 and 8 concurrent streams). Part 2 uses the
fake runtime with no token delay, so the proxy's own cost stands out: added latency per request
and the daemon's CPU time per forwarded SSE event.

    .venv/bin/python bench/router_overhead.py [--rounds N] [--proxy-requests N] [--part 1|2] [--baseline TREE]
                                              [--tokens N,N,...]

With ``--baseline TREE``, part 2 runs a second daemon from another source tree beside this one,
the pairs of both interleaved: old and new measured on the same noisy machine at the same time.
``--tokens 8,64,512`` runs part 2 at each answer length and splits the daemon's CPU into a cost per
request (parsing, routing, the access-log row, the upstream request) and a cost per further event
(a least-squares line through CPU per request against events per request).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import psutil
from _harness import (
    ROOT,
    BenchDaemon,
    ensure_ready,
    median,
    percentile,
    start_daemon,
    start_fake_daemon,
    stream_chat,
)

sys.path.insert(0, str(ROOT))
from daemon.models.registry import DEMO_MODEL_ID

TOKENS = 64


async def batch(session: aiohttp.ClientSession, base: str, headers: dict[str, str], model: str,
                concurrency: int, tag: str) -> tuple[list[float], list[float], float, int]:
    start = time.perf_counter()
    results = await asyncio.gather(*[
        stream_chat(session, base, headers, model, f"Tell a short story about {tag} number {i}.", TOKENS)
        for i in range(concurrency)])
    wall = time.perf_counter() - start
    return [r.ttft_s for r in results], [r.total_s for r in results], wall, sum(r.tokens for r in results)


async def compare(d: BenchDaemon, model: str, concurrency: int, rounds: int) -> dict[str, float]:
    endpoint, key = d.runtime(model)
    direct = (endpoint, {"Authorization": f"Bearer {key}"})
    routed = (f"http://127.0.0.1:{d.port}", {})
    samples: dict[str, dict[str, list[float]]] = {p: {"ttft": [], "total": [], "tps": []} for p in ("direct", "routed")}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        await batch(session, *direct, model, concurrency, "warm-up")  # untimed
        await batch(session, *routed, model, concurrency, "warm-up")
        for r in range(rounds):
            order = [("direct", direct), ("routed", routed)] if r % 2 == 0 else [("routed", routed), ("direct", direct)]
            for name, (base, headers) in order:
                ttfts, totals, wall, tokens = await batch(session, base, headers, model, concurrency, f"{name}-{r}")
                samples[name]["ttft"] += ttfts
                samples[name]["total"] += totals
                samples[name]["tps"].append(tokens / wall)
    d_, r_ = samples["direct"], samples["routed"]
    return {
        "ttft_ratio": median(r_["ttft"]) / median(d_["ttft"]),
        "tps_ratio": median(r_["tps"]) / median(d_["tps"]),
        "ttft_direct_ms": median(d_["ttft"]) * 1000, "ttft_routed_ms": median(r_["ttft"]) * 1000,
        "tps_direct": median(d_["tps"]), "tps_routed": median(r_["tps"]),
    }


async def proxy_cost(daemons: list[BenchDaemon], model: str, requests: int,
                     tokens: int = TOKENS) -> list[dict[str, float]]:
    """Fast fake upstream: added latency per request, and daemon CPU per forwarded SSE event, for
    each daemon; their pairs (direct, routed) interleave, so all see the same machine state."""
    paths = []
    for d in daemons:
        endpoint, key = d.runtime(model)
        paths.append(((endpoint, {"Authorization": f"Bearer {key}"}), (f"http://127.0.0.1:{d.port}", {}),
                      psutil.Process(d.process.pid)))
    lat = [{"direct": [], "routed": []} for _ in daemons]
    events, cpu = [0] * len(daemons), [0.0] * len(daemons)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for _ in range(20):  # warm-up
            for direct, routed, _proc in paths:
                await stream_chat(session, *direct, model, "warm", tokens)
                await stream_chat(session, *routed, model, "warm", tokens)
        for i in range(requests):
            for n in (range(len(paths)) if i % 2 == 0 else reversed(range(len(paths)))):
                direct, routed, proc = paths[n]
                result = await stream_chat(session, *direct, model, f"d{i}", tokens)
                lat[n]["direct"].append(result.total_s)
                before = proc.cpu_times()
                result = await stream_chat(session, *routed, model, f"r{i}", tokens)
                after = proc.cpu_times()
                lat[n]["routed"].append(result.total_s)
                cpu[n] += (after.user - before.user) + (after.system - before.system)
                events[n] += result.events
    figures = []
    for n in range(len(paths)):
        added = sorted(r - dd for r, dd in zip(lat[n]["routed"], lat[n]["direct"], strict=True))
        figures.append({"added_p50_ms": percentile(added, 50) * 1000, "added_p99_ms": percentile(added, 99) * 1000,
                        "cpu_us_per_event": cpu[n] / events[n] * 1e6, "events": events[n],
                        "cpu_us_per_request": cpu[n] / requests * 1e6})
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--proxy-requests", type=int, default=300)
    parser.add_argument("--part", type=int, choices=(1, 2), help="run only this part (default: both)")
    parser.add_argument("--tokens", type=lambda v: [int(n) for n in v.split(",")], default=[TOKENS],
                        metavar="N,N,...", help=f"part 2: the answer lengths to run (default {TOKENS}); with "
                        "several, the CPU is split into a cost per request and one per event")
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="part 2 also runs a daemon from this source tree, interleaved with this one "
                             "(e.g. git archive HEAD~1 | tar -x -C /tmp/old), and prints both")
    args = parser.parse_args()

    if args.part != 2:
        await real_runtime(args.rounds)
    if args.part != 1:
        await fake_runtime(args.proxy_requests, args.baseline, args.tokens)


async def real_runtime(rounds: int) -> None:
    print("Part 1: llama-server + Gemma 3 270M, 64 output tokens, interleaved direct/routed")
    d = await start_daemon()
    try:
        await ensure_ready(d, None, DEMO_MODEL_ID)
        for concurrency in (1, 8):
            r = await compare(d, DEMO_MODEL_ID, concurrency, rounds)
            print(f"  {concurrency} stream(s): TTFT p50 routed/direct = {r['ttft_ratio']:.3f} "
                  f"({r['ttft_routed_ms']:.1f} / {r['ttft_direct_ms']:.1f} ms); "
                  f"tokens/s routed/direct = {r['tps_ratio']:.3f} ({r['tps_routed']:.1f} / {r['tps_direct']:.1f})")
    finally:
        await d.stop()


async def fake_runtime(proxy_requests: int, baseline: Path | None, lengths: list[int]) -> None:
    print("Part 2: fast fake upstream (no token delay), sequential pairs")
    trees = [("this tree", ROOT)] + ([("baseline", baseline.resolve())] if baseline is not None else [])
    daemons: list[BenchDaemon] = []
    try:
        for _name, root in trees:
            daemons.append(await start_fake_daemon(max(lengths), root=root))  # max_tokens caps each answer
        by_length: list[list[dict[str, float]]] = []
        for tokens in lengths:
            figures = await proxy_cost(daemons, "fake", proxy_requests, tokens)
            by_length.append(figures)
            print(f" {tokens} tokens per answer:")
            for (name, root), r in zip(trees, figures, strict=True):
                print(f"  {name} ({root}):")
                print(f"    added latency per request: p50 {r['added_p50_ms']:.2f} ms, p99 {r['added_p99_ms']:.2f} ms")
                print(f"    daemon CPU per forwarded SSE event: {r['cpu_us_per_event']:.1f} µs ({r['events']} events)")
            if len(figures) == 2:
                new, old = figures
                print(f"  this tree / baseline: p50 {new['added_p50_ms'] / old['added_p50_ms']:.2f}, "
                      f"p99 {new['added_p99_ms'] / old['added_p99_ms']:.2f}, "
                      f"CPU per event {new['cpu_us_per_event'] / old['cpu_us_per_event']:.2f}")
        if len(lengths) > 1:
            for n, (name, _root) in enumerate(trees):
                per_request, per_event = _split([(f[n]["events"] / proxy_requests, f[n]["cpu_us_per_request"])
                                                 for f in by_length])
                print(f"  {name}: daemon CPU = {per_request:.0f} µs per request + {per_event:.1f} µs per event")
    finally:
        for d in daemons:
            await d.stop()


def _split(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares line through (events per request, CPU µs per request): its intercept (the
    cost of a request of no events) and its slope (the cost of each further event)."""
    xs, ys = [x for x, _y in points], [y for _x, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


if __name__ == "__main__":
    asyncio.run(main())
