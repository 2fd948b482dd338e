"""What MirbadLLM adds to a request: the same chat sent straight to the model's runtime (through its
node's agent for a model on another node) and through the daemon's own ``/v1`` router, interleaved
round by round with the order alternating, so both see the same machine. TTFT and tokens per second
are medians per path; the ratios are router ÷ baseline (1.0: nothing added).

The router lets these requests through the job's maintenance window with the window's pass token
(``X-MirbadLLM-Job``), never a user's key; nothing else gets past the window.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from daemon.api.jobs import OverheadPath, OverheadPathName, OverheadResult
from daemon.jobs.calls import ChatTiming, RuntimeTarget, timed_chat

PROMPT = "Count from one to fifty in words, separated by commas."


async def measure_overhead(baseline: OverheadPathName, targets: dict[OverheadPathName, RuntimeTarget], rounds: int,
                           max_tokens: int, progress: Callable[[float], None] = lambda _f: None) -> OverheadResult:
    """``targets``: the baseline path and the router, each a ``RuntimeTarget``."""
    timings: dict[OverheadPathName, list[ChatTiming]] = {name: [] for name in targets}
    order = list(targets)
    messages = [{"role": "user", "content": PROMPT}]
    for n in range(rounds):
        for name in order if n % 2 == 0 else reversed(order):  # neither path always goes first
            timings[name].append(await timed_chat(targets[name], messages, max_tokens))
        progress((n + 1) / rounds)
    paths = [_path(name, found) for name, found in timings.items()]
    by_name = {p.path: p for p in paths}
    router, base = by_name.get("router"), by_name.get(baseline)
    return OverheadResult(rounds=rounds, max_tokens=max_tokens, baseline=baseline, paths=paths,
                          ttft_ratio=_ratio(router.ttft_p50_ms if router else None, base.ttft_p50_ms if base else None),
                          tps_ratio=_ratio(router.tokens_per_s_p50 if router else None,
                                           base.tokens_per_s_p50 if base else None))


def _path(name: OverheadPathName, timings: list[ChatTiming]) -> OverheadPath:
    ok = [t for t in timings if t.ok]
    ttfts = [t.ttft_s * 1000 for t in ok if t.ttft_s is not None]
    rates = [r for t in ok if (r := t.decode_tps) is not None]
    return OverheadPath(path=name, requests=len(timings), errors=len(timings) - len(ok),
                        ttft_p50_ms=median(ttfts) if ttfts else None, tokens_per_s_p50=median(rates) if rates else None)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None
