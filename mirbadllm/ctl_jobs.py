"""``mirbadllm ctl bench`` and ``ctl tune``: benchmark or tune a model from a terminal.

    mirbadllm ctl bench MODEL [--preset P] [--levels 1,4,8,16] [--repetitions N] [--max-tokens N] [--overhead [N]]
    mirbadllm ctl tune MODEL [--preset P] [--full] [--dimension D ...] [--apply [--restart]]
    mirbadllm ctl jobs [MODEL]

Both start a job through ``DaemonClient``, draw a progress bar from the job's events, and print
the result. Ctrl-C cancels the job (the daemon restores the model's saved settings).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from daemon.api.client import DaemonClient
from daemon.api.jobs import (
    PRESETS,
    BenchmarkRequest,
    BenchmarkResult,
    JobView,
    OverheadResult,
    SuiteOptions,
    TuneRequest,
    TuningResult,
)

BAR_WIDTH = 28


def add_parser(groups: Any) -> None:
    presets = [p.id for p in PRESETS]
    for name, text in (("bench", "benchmark a running model"), ("tune", "search settings that beat the saved ones")):
        sub = groups.add_parser(name, help=text)
        sub.add_argument("model")
        sub.add_argument("--preset", choices=presets, default="interactive")
        sub.add_argument("--levels", type=_levels, default=None, help="concurrency levels, e.g. 1,4,8,16")
        sub.add_argument("--repetitions", type=int, default=None)
        sub.add_argument("--max-tokens", type=int, default=None, help="output tokens per request")
        sub.add_argument("--long-prompt", type=int, default=None, help="long-prompt tokens (0 skips)")
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        if name == "bench":
            sub.add_argument("--overhead", type=int, nargs="?", const=10, default=None, metavar="ROUNDS",
                             help="also send the same request straight to the runtime (or its node's agent) "
                                  "and through the router, ROUNDS times each, interleaved (default 10)")
        if name == "tune":
            sub.add_argument("--full", action="store_true", help="search every dimension (default: quick)")
            sub.add_argument("--dimension", action="append", default=None, help="search only these steps")
            sub.add_argument("--confirm", type=int, default=5, help="repetitions of the confirmation stage")
            sub.add_argument("--apply", action="store_true", help="write the winner's settings")
            sub.add_argument("--restart", action="store_true", help="with --apply: restart the model")
    jobs = groups.add_parser("jobs", help="benchmarks and tuning runs")
    jobs.add_argument("model", nargs="?", help="only this model's runs (`list` or nothing: every model's)")


def _levels(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError("levels are numbers separated by commas, e.g. 1,4,8") from exc


def suite_from(args: argparse.Namespace, base: SuiteOptions) -> SuiteOptions:
    given = {"levels": args.levels, "repetitions": args.repetitions, "max_tokens": args.max_tokens,
             "long_prompt_tokens": args.long_prompt, "overhead_rounds": getattr(args, "overhead", None)}
    return base.model_copy(update={k: v for k, v in given.items() if v is not None})


def progress_line(view: JobView, width: int = BAR_WIDTH) -> str:
    """``[#######.....]  45 %  measuring  repetition 2: 4 at once  · ETA 3 min 10 s``."""
    filled = round(view.progress * width)
    eta = f"  · ETA {_duration(view.eta_s)}" if view.eta_s and not view.state.finished else ""
    count = f"  {view.candidates_done}/{view.candidates_total}" if view.candidates_total else ""
    detail = f"  {view.message}" if view.message and not view.state.finished else ""
    return f"[{'#' * filled}{'.' * (width - filled)}] {view.progress * 100:3.0f} %{count}  {view.phase}{detail}{eta}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _figure(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def format_benchmark(result: BenchmarkResult) -> list[str]:
    lines = [f"{result.model} · {result.preset} · {result.stamp} · config {result.config_hash or '—'}",
             "  N   tok/s per request   aggregate tok/s   TTFT p50 ms   TTFT p95 ms   errors"]
    for lv in result.levels:
        lines.append(f"{lv.concurrency:>3}   {_figure(lv.per_request_tps):>17}   {_figure(lv.aggregate_tps):>15}"
                     f"   {_figure(lv.ttft_p50_ms, 0):>11}   {_figure(lv.ttft_p95_ms, 0):>11}   {lv.errors:>6}")
    if result.prefill is not None:
        p = result.prefill
        lines.append(f"long prompt: {p.prompt_tokens} tokens, TTFT {p.ttft_ms:.0f} ms ({p.prefill_tps:.0f} tok/s), "
                     f"again (cached) {_figure(p.cached_ttft_ms, 0)} ms")
    for name, check in (("tool calls", result.tool_calls), ("objective answers", result.objective)):
        if check is not None:
            lines.append(f"{name}: {check.passed}/{check.total}")
    if result.overhead is not None:
        lines += format_overhead(result.overhead)
    lines += [f"! {reason}" for reason in result.noisy]
    return lines


def format_overhead(overhead: OverheadResult) -> list[str]:
    """``router ÷ runtime: TTFT 1.04x, tokens/s 0.99x`` and each path's medians."""
    ratio = (f"router ÷ {overhead.baseline}: TTFT {_figure(overhead.ttft_ratio, 2)}x, tokens/s "
             f"{_figure(overhead.tps_ratio, 2)}x ({overhead.rounds} rounds of {overhead.max_tokens} tokens each)")
    lines = [f"overhead: {ratio}"]
    for path in overhead.paths:
        errors = f", {path.errors} failed" if path.errors else ""
        lines.append(f"  {path.path:<8} TTFT p50 {_figure(path.ttft_p50_ms)} ms, {_figure(path.tokens_per_s_p50)} "
                     f"tokens/s{errors}")
    return lines


def format_tuning(result: TuningResult) -> list[str]:
    lines = [f"{result.model} · {result.preset} · {result.search} search · {result.stamp}",
             "   #  step           score    status      settings"]
    for c in result.candidates:
        lines.append(f"{c.index:>4}  {c.step:<13} {_figure(c.score, 3):>6}    {c.status:<10}  {c.effective_config}"
                     + (f"  ({c.error or '; '.join(c.guard_failures)})" if c.status in ("failed", "rejected") else ""))
    if result.confirmation:
        lines.append("confirmation (fresh starts, random order):")
        for c in result.confirmation:
            lines.append(f"  #{c.index:<3} score {_figure(c.score, 3)}  range {_figure(c.score_min, 3)}"
                         f"–{_figure(c.score_max, 3)}  {c.effective_config}"
                         + (f"  ({c.status})" if c.status != "measured" else ""))
    gain = f" (tuned ÷ saved = {result.gain:.3f})" if result.gain else ""
    lines.append(f"decision: {result.decision}{gain}")
    lines += [f"note: {n}" for n in result.notes] + [f"! {n}" for n in result.noisy]
    if result.restore_note:
        lines.append(f"! {result.restore_note}")
    return lines


async def follow(client: DaemonClient, job: JobView, out: TextIO | None = None) -> JobView:
    """Draw the job's progress (on stderr, so ``--json`` output stays clean) until the job ends."""
    out = out or sys.stderr
    since, view = 0, job
    while not view.state.finished:
        page = await client.events(since, timeout=15)
        since = page.last_id
        for event in page.events:
            data = event.data.get("job")
            if event.type.startswith("job.") and isinstance(data, dict) and data.get("id") == job.id:
                view = JobView.model_validate(data)
        if page.reset or not page.events:
            view = await client.get_job(job.id)
        print("\r" + progress_line(view)[:150].ljust(150), end="", file=out, flush=True)
    print(file=out)
    return await client.get_job(job.id)


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.group == "jobs":
        model = None if args.model in (None, "list") else args.model
        views = await client.list_jobs(model)
        for view in views:
            print(f"{view.id:<48} {view.state.value:<10} {view.preset:<15} {view.message[:60]}")
        if not views:
            print(f"no benchmark or tuning runs{f' of {model}' if model else ''} yet (ctl bench MODEL, ctl tune MODEL)")
        return 0
    if args.group == "bench":
        job = await client.start_benchmark(BenchmarkRequest(model=args.model, preset=args.preset,
                                                            suite=suite_from(args, SuiteOptions())))
    else:
        base = TuneRequest(model=args.model).suite
        job = await client.start_tune(TuneRequest(model=args.model, preset=args.preset,
                                                  search="full" if args.full else "quick",
                                                  dimensions=args.dimension, suite=suite_from(args, base),
                                                  confirm_repetitions=args.confirm))
    print(f"{job.id} started")
    try:
        view = await follow(client, job)
    except asyncio.CancelledError:
        print("\ncancelling: the model's saved settings are restored…", flush=True)
        await client.cancel_job(job.id)
        raise
    code = _report(args, view) if view.result is not None else _failed(view)
    if code == 0:
        await apply_if_asked(args, client, view)
    return code


def _failed(view: JobView) -> int:
    print(f"{view.id} {view.state.value}: {view.error or 'no result'}", file=sys.stderr)
    return 1


def _report(args: argparse.Namespace, view: JobView) -> int:
    result = view.result
    if args.json:
        print(result.model_dump_json(indent=2) if result is not None else "null")
    elif isinstance(result, BenchmarkResult):
        print("\n".join(format_benchmark(result)))
    elif isinstance(result, TuningResult):
        print("\n".join(format_tuning(result)))
    if view.state.value != "succeeded":
        return _failed(view)
    return 0


async def apply_if_asked(args: argparse.Namespace, client: DaemonClient, view: JobView) -> None:
    result = view.result
    if args.group != "tune" or not args.apply or not isinstance(result, TuningResult) or result.winner is None:
        return
    applied = await client.apply_job(view.id, restart=args.restart)
    print(f"applied the winner to {applied.definition.id}" + (" and restarted it" if args.restart else
                                                              "; restart it to use the new settings"))
