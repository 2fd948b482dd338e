"""What tuning gains on this machine: the Interactive-chat preset on the demo Gemma 3 270M, quick search.

Runs a real tuning job through a daemon in a subprocess (real llama-server), then prints the
confirmed score of the winner over the saved (default) settings — both re-measured from fresh
starts in random order in the same run — and the per-repetition score ranges behind the decision.
When the defaults are already the best, the answer is "no change" (1.000).

    .venv/bin/python bench/tuning_gain.py [--max-tokens 64] [--repetitions 3] [--confirm 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from _harness import ROOT, ensure_ready, start_daemon

sys.path.insert(0, str(ROOT))
from daemon.api.jobs import JobView, SuiteOptions, TuneRequest, TuningResult
from daemon.models.registry import DEMO_MODEL_ID
from mirbadllm.ctl_jobs import format_tuning, progress_line


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--confirm", type=int, default=5)
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--long-prompt", type=int, default=1024)
    parser.add_argument("--search", choices=("quick", "full"), default="quick")
    return parser.parse_args()


async def follow(d: object, job: JobView) -> JobView:
    client = d.client  # type: ignore[attr-defined]
    since, view, last = 0, job, ""
    while not view.state.finished:
        page = await client.events(since, timeout=15)
        since = page.last_id
        for event in page.events:
            data = event.data.get("job")
            if isinstance(data, dict) and data.get("id") == job.id:
                view = JobView.model_validate(data)
        line = progress_line(view)[:140]
        if line != last:
            print(line, flush=True)
            last = line
    return await client.get_job(job.id)


async def main() -> int:
    args = parse()
    d = await start_daemon()
    try:
        await ensure_ready(d, None, DEMO_MODEL_ID)
        suite = SuiteOptions(levels=[int(v) for v in args.levels.split(",")], repetitions=args.repetitions,
                             max_tokens=args.max_tokens, long_prompt_tokens=args.long_prompt)
        request = TuneRequest(model=DEMO_MODEL_ID, preset="interactive", search=args.search, suite=suite,
                              confirm_repetitions=args.confirm)
        plan = await d.client.plan_tune(request)
        print(f"machine: {os.cpu_count()} CPUs · plan: {plan.candidates} configurations + {plan.confirmations} "
              f"confirmations, estimated {plan.eta_s / 60:.0f} min")
        for step in plan.steps:
            print(f"  {step.dimension}: {', '.join(step.values)}")
        started = time.monotonic()
        view = await follow(d, await d.client.start_tune(request))
        result = view.result
        if not isinstance(result, TuningResult):
            print(f"tuning {view.state.value}: {view.error}")
            return 1
        print("\n".join(format_tuning(result)))
        gain = result.gain if result.winner is not None and result.gain else 1.0
        verdict = "tuned" if result.winner is not None else "no change"
        print(f"\ntuned ÷ default score: {gain:.3f} ({verdict}) in {(time.monotonic() - started) / 60:.1f} min")
        for c in result.confirmation:
            who = "baseline (saved settings)" if c.index == 0 else f"candidate #{c.index} ({c.effective_config})"
            print(f"  confirmation range {who}: {c.score_min:.3f}–{c.score_max:.3f}"
                  if c.score_min is not None and c.score_max is not None else f"  {who}: {c.status} {c.error}")
        return 0
    finally:
        await d.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
