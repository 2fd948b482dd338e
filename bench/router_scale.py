"""How the /v1 router holds many streams at once: 1, 64, 256 and 1,024 concurrent streams through
the router against the fast fake runtime (no token delay), beside the same streams sent straight to it.

Per level: the added latency (the routed streams' p50 and p99 less the direct ones'), the daemon's
CPU per forwarded SSE event, and at the end the per-event cost at the top level against that at 1
(target at most 1.2x); while the top level runs, the admin API (``GET /api/status``) is polled and
its p99 printed (target under 50 ms). The fake is started with the most slots a model may have
(256) and the model's queue is raised so that no level is refused: past the slots, streams wait,
in the fake's backlog when direct and in the router's queue when routed.

    .venv/bin/python bench/router_scale.py [--levels 1,64,256,1024] [--streams-per-level N] [--tree TREE]
    .venv/bin/python bench/router_scale.py --soak SECONDS --streams N [--tree TREE]

``--soak``: N streams at once, each starting the next as it ends, for SECONDS; prints the streams
done and failed, and the daemon's RSS and open files at the start and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil
from _harness import ROOT, BenchDaemon, percentile, start_fake_daemon, stream_chat

from core.relay import RUNTIME_KEEPALIVE_S

TOKENS = 64
SLOTS = 256  # the most --parallel a model's settings allow
ADMIN_POLL_S = 0.05


@dataclass
class Level:
    streams: int
    direct_p50_ms: float
    direct_p99_ms: float
    routed_p50_ms: float
    routed_p99_ms: float
    cpu_us_per_event: float
    failed: int


def _raise_open_files() -> None:
    """A thousand streams each way need more sockets than a default soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))


async def _batch(session: aiohttp.ClientSession, base: str, headers: dict[str, str], concurrency: int,
                 tag: str) -> tuple[list[float], int, int]:
    """``concurrency`` streams at once: their total times, events, and how many failed."""
    results = await asyncio.gather(*[
        stream_chat(session, base, headers, "fake", f"{tag} {i}", TOKENS) for i in range(concurrency)],
        return_exceptions=True)
    ok = [r for r in results if not isinstance(r, BaseException)]
    return [r.total_s for r in ok], sum(r.events for r in ok), len(results) - len(ok)


async def measure_level(d: BenchDaemon, session: aiohttp.ClientSession, concurrency: int, total: int) -> Level:
    endpoint, key = d.runtime("fake")
    direct = (endpoint, {"Authorization": f"Bearer {key}"})
    routed = (f"http://127.0.0.1:{d.port}", {})
    proc = psutil.Process(d.process.pid)
    rounds = max(2, -(-total // concurrency))
    times: dict[str, list[float]] = {"direct": [], "routed": []}
    cpu, events, failed = 0.0, 0, 0
    await _batch(session, *routed, concurrency, "warm-up")  # opens the connections, untimed
    for r in range(rounds):
        for name in (("direct", "routed") if r % 2 == 0 else ("routed", "direct")):
            if name == "direct":
                took, _events, lost = await _batch(session, *direct, concurrency, f"d{r}")
            else:
                before = proc.cpu_times()
                took, got, lost = await _batch(session, *routed, concurrency, f"r{r}")
                after = proc.cpu_times()
                cpu += (after.user - before.user) + (after.system - before.system)
                events += got
            times[name] += took
            failed += lost
    d_, r_ = times["direct"], times["routed"]
    return Level(concurrency, percentile(d_, 50) * 1000, percentile(d_, 99) * 1000, percentile(r_, 50) * 1000,
                 percentile(r_, 99) * 1000, cpu / max(events, 1) * 1e6, failed)


async def _poll_admin(d: BenchDaemon, stop: asyncio.Event, took: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await d.client.status()
        took.append(time.perf_counter() - start)
        await asyncio.sleep(ADMIN_POLL_S)


async def scale(levels: list[int], per_level: int, tree: Path) -> None:
    print(f"Router at scale: fast fake runtime ({SLOTS} slots, {TOKENS} tokens), streams at once through the "
          f"router vs straight to the fake; the daemon from {tree}")
    d = await start_fake_daemon(TOKENS, parallel=SLOTS, max_queue=max(levels), root=tree)
    found: list[Level] = []
    admin: list[float] = []
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
            print(f"  {'streams':>7}  {'added p50':>9}  {'added p99':>9}  {'direct p50/p99 ms':>17}  "
                  f"{'routed p50/p99 ms':>17}  {'µs/event':>8}  failed")
            for concurrency in levels:
                stop = asyncio.Event()
                poller = asyncio.create_task(_poll_admin(d, stop, admin)) if concurrency == max(levels) else None
                try:
                    level = await measure_level(d, session, concurrency, per_level)
                finally:
                    stop.set()
                    if poller is not None:
                        await poller
                found.append(level)
                print(f"  {level.streams:>7}  {level.routed_p50_ms - level.direct_p50_ms:>6.2f} ms  "
                      f"{level.routed_p99_ms - level.direct_p99_ms:>6.2f} ms  "
                      f"{level.direct_p50_ms:>8.1f}/{level.direct_p99_ms:<8.1f}  "
                      f"{level.routed_p50_ms:>8.1f}/{level.routed_p99_ms:<8.1f}  {level.cpu_us_per_event:>8.1f}  "
                      f"{level.failed}")
    finally:
        await d.stop()
    first, top = found[0], found[-1]
    print(f"  CPU per event at {top.streams} / at {first.streams}: "
          f"{top.cpu_us_per_event / first.cpu_us_per_event:.2f}x (target <= 1.2x)")
    if admin:
        print(f"  admin API (GET /api/status every {ADMIN_POLL_S * 1000:.0f} ms) during {top.streams} streams: "
              f"p50 {percentile(admin, 50) * 1000:.1f} ms, p99 {percentile(admin, 99) * 1000:.1f} ms "
              f"({len(admin)} calls; target p99 < 50 ms)")


def _daemon_figures(proc: psutil.Process) -> str:
    return f"RSS {proc.memory_info().rss / 2**20:.1f} MiB, {proc.num_fds()} open files"


async def soak(seconds: float, streams: int, tree: Path) -> None:
    print(f"Soak: {streams} streams at once through the router for {seconds:g} s (fast fake runtime)")
    d = await start_fake_daemon(TOKENS, parallel=min(SLOTS, streams), max_queue=streams, root=tree)
    proc = psutil.Process(d.process.pid)
    done = failed = 0
    errors: dict[str, int] = {}
    try:
        print(f"  start: {_daemon_figures(proc)}")
        end = time.monotonic() + seconds
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:

            async def worker(n: int) -> None:
                nonlocal done, failed
                while time.monotonic() < end:
                    try:
                        await stream_chat(session, f"http://127.0.0.1:{d.port}", {}, "fake", f"soak {n}", TOKENS)
                        done += 1
                    except (aiohttp.ClientError, RuntimeError, TimeoutError) as exc:
                        failed += 1
                        why = f"{type(exc).__name__}: {str(exc)[:160]}"
                        errors[why] = errors.get(why, 0) + 1

            async def sample() -> None:  # the daemon's figures at each quarter: flat, or growing
                for quarter in (1, 2, 3):
                    await asyncio.sleep(seconds / 4)
                    print(f"  {quarter}/4:   {_daemon_figures(proc)}, streams done {done}, failed {failed}", flush=True)

            await asyncio.gather(sample(), *[worker(n) for n in range(streams)])
        # The client's connections are closed, and the router's idle ones to the runtime expire.
        await asyncio.sleep(RUNTIME_KEEPALIVE_S + 1)
        print(f"  end:   {_daemon_figures(proc)}")
        print(f"  streams done {done}, failed {failed}")
        for why, count in sorted(errors.items(), key=lambda item: -item[1])[:5]:
            print(f"    {count} x {why}")
    finally:
        await d.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,64,256,1024", help="streams at once, comma-separated")
    parser.add_argument("--streams-per-level", type=int, default=2048,
                        help="streams each way per level, at least two rounds of the level")
    parser.add_argument("--soak", type=float, metavar="SECONDS", help="soak instead: this long")
    parser.add_argument("--streams", type=int, default=64, help="streams at once in the soak")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the daemon's source tree (another one, e.g. an older commit's, to compare)")
    args = parser.parse_args()
    _raise_open_files()
    if args.soak:
        await soak(args.soak, args.streams, args.tree.resolve())
    else:
        await scale([int(n) for n in args.levels.split(",")], args.streams_per_level, args.tree.resolve())


if __name__ == "__main__":
    asyncio.run(main())
