"""Scores and guards: how a candidate compares with the baseline, as pure functions.

A score is the weighted geometric mean of candidate ÷ baseline ratios (baseline ÷ candidate for
latencies), with the weights renormalised over the components measured on both sides; the
baseline scores 1.0. Guards are limits a candidate must keep; an absolute guard the baseline
itself breaks becomes "no worse than the baseline" for the run, and the run says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

GuardKind = Literal["max", "min", "max_ratio", "min_ratio"]


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``pct`` % of values at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(pct / 100 * len(ordered))))
    return ordered[rank - 1]


def median_metrics(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per metric, the median over the runs that measured it."""
    keys = sorted({k for run in runs for k in run})
    return {k: float(statistics.median([run[k] for run in runs if k in run])) for k in keys}


@dataclass(frozen=True)
class Component:
    metric: str
    weight: float
    higher_is_better: bool = True


@dataclass(frozen=True)
class Score:
    value: float | None
    ratios: dict[str, float]
    rejected: str | None = None


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def score(components: Sequence[Component], candidate: Mapping[str, float],
          baseline: Mapping[str, float]) -> Score:
    """Weighted geometric mean of the ratios; a broken active measurement rejects the candidate."""
    ratios: dict[str, float] = {}
    total_weight = 0.0
    log_sum = 0.0
    for c in components:
        base, cand = baseline.get(c.metric), candidate.get(c.metric)
        if not _usable(base) or cand is None:
            continue  # not measured on both sides: its weight goes to the others
        if not _usable(cand):
            return Score(None, ratios, f"{c.metric} is {cand}: not a usable measurement")
        assert base is not None
        ratio = cand / base if c.higher_is_better else base / cand
        ratios[c.metric] = ratio
        total_weight += c.weight
        log_sum += c.weight * math.log(ratio)
    if total_weight <= 0:
        return Score(None, ratios, "no score component was measured on both sides")
    return Score(math.exp(log_sum / total_weight), ratios)


@dataclass(frozen=True)
class Guard:
    """``metric`` compared with ``limit``: absolute (max, min) or relative to the baseline (x_ratio)."""

    metric: str
    kind: GuardKind
    limit: float
    label: str

    def describe(self) -> str:
        return self.label


def effective_guards(guards: Sequence[Guard], baseline: Mapping[str, float]) -> tuple[list[Guard], list[str]]:
    """The guards for one run: absolute ones the baseline breaks become relative, with a note."""
    out: list[Guard] = []
    notes: list[str] = []
    for g in guards:
        value = baseline.get(g.metric)
        broken = value is not None and ((g.kind == "max" and value > g.limit) or
                                        (g.kind == "min" and value < g.limit))
        if broken:
            kind: GuardKind = "max_ratio" if g.kind == "max" else "min_ratio"
            relative = replace(g, kind=kind, limit=1.0, label=f"{g.label} → no worse than the baseline")
            out.append(relative)
            notes.append(f"the baseline breaks '{g.label}' ({value:g}): that guard is relative for this run")
        else:
            out.append(g)
    return out, notes


def guard_failures(guards: Sequence[Guard], candidate: Mapping[str, float],
                   baseline: Mapping[str, float]) -> list[str]:
    """The guards a candidate breaks, each as one line naming the figures."""
    failures: list[str] = []
    for g in guards:
        value, base = candidate.get(g.metric), baseline.get(g.metric)
        if value is None:
            if base is not None:
                failures.append(f"{g.label}: not measured")
            continue
        if g.kind in ("max_ratio", "min_ratio"):
            if base is None:
                continue
            bound = base * g.limit
        else:
            bound = g.limit
        broken = value > bound if g.kind in ("max", "max_ratio") else value < bound
        if broken or not math.isfinite(value):
            failures.append(f"{g.label}: {value:g} (limit {bound:g})")
    return failures


@dataclass(frozen=True)
class Decision:
    winner: str | None
    gain: float | None
    reason: str


def score_range(components: Sequence[Component], repetitions: Sequence[Mapping[str, float]],
                reference: Mapping[str, float]) -> tuple[float, float] | None:
    """Min and max of the per-repetition scores against ``reference``; None if one cannot be scored."""
    values = [score(components, rep, reference).value for rep in repetitions]
    if not values or any(v is None for v in values):
        return None
    finite = [v for v in values if v is not None]
    return min(finite), max(finite)


def decide(baseline_range: tuple[float, float], candidates: Mapping[str, tuple[float, tuple[float, float] | None]],
           min_gain: float) -> Decision:
    """The confirmed winner: the best score ≥ 1 + ``min_gain`` whose range clears the baseline's."""
    best: tuple[str, float] | None = None
    reasons: list[str] = []
    for name, (value, rng) in candidates.items():
        if value < 1.0 + min_gain:
            reasons.append(f"{name} scored {value:.3f}, under the {1 + min_gain:.2f} needed")
        elif rng is None or rng[0] <= baseline_range[1]:
            low = "n/a" if rng is None else f"{rng[0]:.3f}"
            reasons.append(f"{name}'s range (from {low}) overlaps the baseline's (to {baseline_range[1]:.3f})")
        elif best is None or value > best[1]:
            best = (name, value)
    if best is None:
        return Decision(None, None, "; ".join(reasons) or "no candidate to confirm")
    return Decision(best[0], best[1], f"{best[0]} beats the baseline by {100 * (best[1] - 1):.1f} %")
