"""How the /v1 router holds many streams at once: 1, 64, 256 and 1,024 concurrent streams through
the router against the fast fake runtime (no token delay), or the real llama-server (``--runtime
real``, below), beside the same streams sent straight to it.

Per level: the added latency (the routed streams' p50 and p99 less the direct ones'), the daemon's
CPU per forwarded SSE event, and at the end the per-event cost at the top level against that at 1
(target at most 1.2x). While the top level runs, the admin API (``GET /api/status``) is polled from a
process of its own (as the tray app would: the bench's own loop, busy with a thousand streams, would
add its delay to every call), and its p50/p99 printed (target p99 under 50 ms) in two phases of the
routed rounds: the ramp, from the burst of requests until the daemon has taken them all (the
router's ``total`` in the answer says so; the call that sees it counts in the ramp), and the
steady stream after it until the round ends (``--timeline``: each call); beside them the daemon's
CPU share in those rounds against the machine's load (a daemon short of CPU queues all its work).
The fake is started with the most slots a model may have (256) and the model's queue is raised so
that no level is refused: past the slots, streams wait, in the fake's backlog when direct and in
the router's queue when routed.

    .venv/bin/python bench/router_scale.py [--levels 1,64,256,1024] [--streams-per-level N] [--tree TREE] [--timeline]
    .venv/bin/python bench/router_scale.py --soak SECONDS --streams N [--tree TREE]

``--soak``: N streams at once, each starting the next as it ends, for SECONDS; prints the streams
done and failed (an error, or an answer short of its tokens: something lost), and the daemon's RSS
and open files at the start, each quarter and the end.

``--runtime real`` (the levels and the soak): against the real llama-server (``make runtime``) and
the Gemma 3 270M demo model (4 slots, 16 tokens an answer) instead of the fast fake. Past the 4
slots most streams wait: direct ones in llama-server's own queue, routed ones in the router's
queue (raised to the top level, so none is refused); the clients have no timeout (a stream at the
back of a thousand waits minutes), and the added latency is then mostly how the two queues order
the same work. ``--streams-per-level`` defaults to 64 there (two rounds of each level above it);
the 4 slots answer ~5 streams a second on a 2-core machine, so a level of N (a warm-up round and
two each way) takes ~N s: 256 about 4 min, 1,024 about 17.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil
from _harness import (
    ROOT,
    BenchDaemon,
    ensure_ready,
    percentile,
    start_daemon,
    start_fake_daemon,
    stream_chat,
)

from core.relay import RUNTIME_KEEPALIVE_S
from daemon.api.client import DaemonClient
from daemon.api.locations import read_admin_token
from daemon.models.registry import DEMO_MODEL_ID

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
    rounds: list[Round] = field(default_factory=list)
    cpu_s: float = 0.0  # the daemon's CPU in the routed rounds
    why: Counter[str] = field(default_factory=Counter)  # "direct: the error" or "routed: ...": how many


@dataclass
class Round:
    """One routed round: when it began and ended (time.monotonic, the same clock in every process),
    and the router's request count for the model before it."""

    start: float
    end: float
    total_before: int
    streams: int


def _raise_open_files() -> None:
    """A thousand streams each way need more sockets than a default soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))


@dataclass(frozen=True)
class Runtime:
    """What the levels run against: the model (its id in the router and the agent's records) and
    the tokens of an answer."""

    model: str
    tokens: int


FAKE = Runtime("fake", TOKENS)


async def _batch(session: aiohttp.ClientSession, base: str, headers: dict[str, str], concurrency: int,
                 tag: str, runtime: Runtime, why: Counter[str]) -> tuple[list[float], int, int]:
    """``concurrency`` streams at once: their total times, events, and how many failed (an error,
    or an answer short of its tokens), each failure counted in ``why``."""
    results = await asyncio.gather(*[
        stream_chat(session, base, headers, runtime.model, f"{tag} {i}", runtime.tokens) for i in range(concurrency)],
        return_exceptions=True)
    ok = [r for r in results if not isinstance(r, BaseException) and r.tokens == runtime.tokens]
    side = "warm-up" if tag == "warm-up" else "direct" if tag.startswith("d") else "routed"
    why.update(f"{side}: {type(r).__name__}: {str(r)[:120]}" if isinstance(r, BaseException)
               else f"{side}: an answer of {r.tokens} tokens" for r in results if r not in ok)
    return [r.total_s for r in ok], sum(r.events for r in ok), len(results) - len(ok)


async def measure_level(d: BenchDaemon, session: aiohttp.ClientSession, concurrency: int, total: int,
                        runtime: Runtime = FAKE, direct_session: aiohttp.ClientSession | None = None) -> Level:
    """``direct_session``: the client of the direct streams, if not ``session``."""
    endpoint, key = d.runtime(runtime.model)
    direct = (endpoint, {"Authorization": f"Bearer {key}"})
    routed = (f"http://127.0.0.1:{d.port}", {})
    proc = psutil.Process(d.process.pid)
    rounds = max(2, -(-total // concurrency))
    times: dict[str, list[float]] = {"direct": [], "routed": []}
    cpu, events, failed = 0.0, 0, 0
    spans: list[Round] = []
    why: Counter[str] = Counter()
    await _batch(session, *routed, concurrency, "warm-up", runtime, why)  # opens the connections, untimed
    for r in range(rounds):
        for name in (("direct", "routed") if r % 2 == 0 else ("routed", "direct")):
            if name == "direct":
                took, _events, lost = await _batch(direct_session or session, *direct, concurrency, f"d{r}", runtime, why)
            else:
                stats = (await d.client.status()).router.get(runtime.model)
                start = time.monotonic()
                before = proc.cpu_times()
                took, got, lost = await _batch(session, *routed, concurrency, f"r{r}", runtime, why)
                after = proc.cpu_times()
                spans.append(Round(start, time.monotonic(), stats.total if stats else 0, concurrency))
                cpu += (after.user - before.user) + (after.system - before.system)
                events += got
            times[name] += took
            failed += lost
    d_, r_ = times["direct"], times["routed"]
    return Level(concurrency, percentile(d_, 50) * 1000, percentile(d_, 99) * 1000, percentile(r_, 50) * 1000,
                 percentile(r_, 99) * 1000, cpu / max(events, 1) * 1e6, failed, spans, cpu, why)


@dataclass
class AdminCall:
    sent: float  # time.monotonic
    took_s: float
    total: int  # the router's request count for the model in the answer
    in_flight: int


async def poll_admin(url: str, token: str, out: Path, model: str) -> None:
    """``--poll-admin``: call ``GET /api/status`` every ADMIN_POLL_S until SIGTERM, one line per call
    in ``out``. Runs in a process of its own, its loop idle but for these calls."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    client = DaemonClient(url, token)
    with out.open("w") as lines:
        while not stop.is_set():
            sent = time.monotonic()
            status = await client.status()
            took = time.monotonic() - sent
            stats = status.router.get(model)
            lines.write(f"{sent} {took} {stats.total if stats else 0} {stats.in_flight if stats else 0}\n")
            lines.flush()
            try:
                await asyncio.wait_for(stop.wait(), ADMIN_POLL_S)
            except TimeoutError:
                pass
    await client.close()


class AdminPoller:
    """The ``--poll-admin`` process, and the calls it made."""

    def __init__(self, d: BenchDaemon, model: str) -> None:
        self._out = Path(tempfile.mkdtemp(prefix="admin-calls-")) / "calls"  # the poller writes it
        self._proc = subprocess.Popen([sys.executable, __file__, "--poll-admin", str(self._out),
                                       "--url", f"http://127.0.0.1:{d.port}", "--home", str(d.home),
                                       "--model", model])

    def stop(self) -> list[AdminCall]:
        self._proc.send_signal(signal.SIGTERM)
        self._proc.wait(30)
        calls = [AdminCall(float(a), float(b), int(c), int(e))
                 for a, b, c, e in (line.split() for line in (self._out.read_text() if self._out.exists() else "").splitlines())]
        shutil.rmtree(self._out.parent)
        return calls


def admin_phases(calls: list[AdminCall], rounds: list[Round]) -> tuple[list[float], list[float]]:
    """The calls' times in the routed rounds' ramps and in their steady streams (see the docstring)."""
    ramp: list[float] = []
    steady: list[float] = []
    for span in rounds:
        inside = [c for c in calls if span.start <= c.sent < span.end]
        taken = next((c.sent for c in inside if c.total >= span.total_before + span.streams), span.end)
        ramp += [c.took_s for c in inside if c.sent <= taken]
        steady += [c.took_s for c in inside if c.sent > taken]
    return ramp, steady


def _figures(took: list[float]) -> str:
    if not took:
        return "no calls"
    return (f"p50 {percentile(took, 50) * 1000:.1f} ms, p99 {percentile(took, 99) * 1000:.1f} ms, "
            f"max {max(took) * 1000:.1f} ms ({len(took)} calls)")


async def scale(levels: list[int], per_level: int, tree: Path, timeline: bool = False, real: bool = False) -> None:
    if real:
        runtime = Runtime(DEMO_MODEL_ID, REAL_TOKENS)
        print(f"Router at scale: real llama-server, Gemma 3 270M ({REAL_SLOTS} slots, {REAL_TOKENS} tokens), "
              f"streams at once through the router vs straight to llama-server; the daemon from {tree}")
        print(f"  past {REAL_SLOTS} streams most wait: direct ones in llama-server's own queue, routed ones in the "
              f"router's (raised to {max(levels)}); no client timeout")
        d = await _real_daemon(max(levels), tree)
    else:
        runtime = FAKE
        print(f"Router at scale: fast fake runtime ({SLOTS} slots, {TOKENS} tokens), streams at once through the "
              f"router vs straight to the fake; the daemon from {tree}")
        d = await start_fake_daemon(TOKENS, parallel=SLOTS, max_queue=max(levels), root=tree)
    found: list[Level] = []
    calls: list[AdminCall] = []
    # On the real runtime the streams at the back of the queues wait for minutes.
    timeout = aiohttp.ClientTimeout(total=None if real else 600)
    # llama-server closes a kept-alive connection when it likes (the client then reads "Server
    # disconnected" on its next request) and holds one of its few HTTP threads for each idle
    # one: the direct streams each open a connection of their own (a local connect, ~0.1 ms).
    direct = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True), timeout=timeout) \
        if real else None
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            print(f"  {'streams':>7}  {'added p50':>9}  {'added p99':>9}  {'direct p50/p99 ms':>17}  "
                  f"{'routed p50/p99 ms':>17}  {'µs/event':>8}  failed")
            for concurrency in levels:
                poller = AdminPoller(d, runtime.model) if concurrency == max(levels) else None
                try:
                    level = await measure_level(d, session, concurrency, per_level, runtime, direct)
                finally:
                    if poller is not None:
                        calls = poller.stop()
                found.append(level)
                print(f"  {level.streams:>7}  {level.routed_p50_ms - level.direct_p50_ms:>6.2f} ms  "
                      f"{level.routed_p99_ms - level.direct_p99_ms:>6.2f} ms  "
                      f"{level.direct_p50_ms:>8.1f}/{level.direct_p99_ms:<8.1f}  "
                      f"{level.routed_p50_ms:>8.1f}/{level.routed_p99_ms:<8.1f}  {level.cpu_us_per_event:>8.1f}  "
                      f"{level.failed}", flush=True)
                for reason, count in level.why.most_common(4):  # where they failed (the warm-up: listed, not counted)
                    print(f"           {count} x {reason}")
    finally:
        if direct is not None:
            await direct.close()
        await d.stop()
    first, top = found[0], found[-1]
    print(f"  CPU per event at {top.streams} / at {first.streams}: "
          f"{top.cpu_us_per_event / first.cpu_us_per_event:.2f}x (target <= 1.2x)")
    if calls:
        ramp, steady = admin_phases(calls, top.rounds)
        print(f"  admin API (GET /api/status every {ADMIN_POLL_S * 1000:.0f} ms, from its own process) during the "
              f"{top.streams}-stream routed rounds (target p99 < 50 ms):")
        print(f"    ramp (the burst, until the daemon has taken every request): {_figures(ramp)}")
        print(f"    steady (every request taken, streaming until the round ends): {_figures(steady)}")
        print(f"    all calls at this level, straight-to-the-{'runtime' if real else 'fake'} rounds included: "
              f"{_figures([c.took_s for c in calls])}")
        wall = sum(r.end - r.start for r in top.rounds)
        print(f"    the daemon's CPU in these rounds: {top.cpu_s:.2f} s in {wall:.2f} s, {top.cpu_s / wall:.0%} of one "
              f"core (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: what it could get)")
        if timeline:
            origin = top.rounds[0].start
            print(f"    timeline (s from the first routed round, at {origin:.3f} on time.monotonic; the call's ms, the "
                  "router's total and in flight in its answer; | a round's edge):")
            edges = sorted([r.start for r in top.rounds] + [r.end for r in top.rounds])
            for c in calls:
                while edges and edges[0] <= c.sent:
                    print(f"    | {edges.pop(0) - origin:7.2f}")
                print(f"      {c.sent - origin:7.2f}  {c.took_s * 1000:7.1f}  {c.total:6d}  {c.in_flight:5d}")


def _daemon_figures(proc: psutil.Process) -> str:
    return f"RSS {proc.memory_info().rss / 2**20:.1f} MiB, {proc.num_fds()} open files"


REAL_TOKENS = 16
REAL_SLOTS = 4


async def _real_daemon(streams: int, tree: Path) -> BenchDaemon:
    """The demo model on the real llama-server, its queue raised so that no stream is refused. The
    daemon's work-path probe (one token, when the router has nothing in flight: in the direct rounds)
    waits as long as llama-server's queue does: at 15 s it timed out behind 256 direct streams and
    the daemon restarted the model under them."""
    d = await start_daemon(root=tree, config="[health]\nprobe_timeout_s = 3600\n")
    definition = (await d.client.get_model(DEMO_MODEL_ID)).definition
    definition.max_queue = streams
    definition.settings.parallel = REAL_SLOTS  # type: ignore[union-attr]  # the demo model is llama.cpp
    await d.client.update_model(definition)
    await ensure_ready(d, None, DEMO_MODEL_ID)
    return d


async def soak(seconds: float, streams: int, tree: Path, runtime: str) -> None:
    real = runtime == "real"
    model, tokens = (DEMO_MODEL_ID, REAL_TOKENS) if real else ("fake", TOKENS)
    print(f"Soak: {streams} streams at once through the router for {seconds:g} s "
          f"({'real llama-server, Gemma 3 270M, ' + str(REAL_SLOTS) + ' slots' if real else 'fast fake runtime'}, "
          f"{tokens} tokens an answer)")
    d = await (_real_daemon(streams, tree) if real else
               start_fake_daemon(TOKENS, parallel=min(SLOTS, streams), max_queue=streams, root=tree))
    proc = psutil.Process(d.process.pid)
    done = failed = 0
    errors: dict[str, int] = {}
    try:
        print(f"  start: {_daemon_figures(proc)}")
        end = time.monotonic() + seconds
        connector = aiohttp.TCPConnector(limit=0)
        # On the real runtime most streams wait in the router's queue (it has no time limit) for minutes.
        timeout = aiohttp.ClientTimeout(total=None if real else 600)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def worker(n: int) -> None:
                nonlocal done, failed
                while time.monotonic() < end:
                    try:
                        got = await stream_chat(session, f"http://127.0.0.1:{d.port}", {}, model, f"soak {n}", tokens)
                        if got.tokens != tokens:  # an error event, or an answer cut short
                            raise RuntimeError(f"an answer of {got.tokens} tokens, not {tokens}")
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
    parser.add_argument("--streams-per-level", type=int,
                        help="streams each way per level, at least two rounds of the level (default: 2048; 64 "
                             "on the real runtime)")
    parser.add_argument("--soak", type=float, metavar="SECONDS", help="soak instead: this long")
    parser.add_argument("--streams", type=int, default=64, help="streams at once in the soak")
    parser.add_argument("--runtime", choices=("fake", "real"), default="fake",
                        help="the levels' and the soak's runtime: the fast fake, or the real llama-server with "
                             "the demo model")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the daemon's source tree (another one, e.g. an older commit's, to compare)")
    parser.add_argument("--timeline", action="store_true", help="print each admin call of the top level")
    parser.add_argument("--poll-admin", type=Path, help=argparse.SUPPRESS)  # the poller process (AdminPoller)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll_admin:
        await poll_admin(args.url, read_admin_token(args.home) or "", args.poll_admin, args.model)
        return
    _raise_open_files()
    if args.soak:
        await soak(args.soak, args.streams, args.tree.resolve(), args.runtime)
    else:
        real = args.runtime == "real"
        per_level = args.streams_per_level or (64 if real else 2048)
        await scale([int(n) for n in args.levels.split(",")], per_level, args.tree.resolve(), args.timeline, real)


if __name__ == "__main__":
    asyncio.run(main())
