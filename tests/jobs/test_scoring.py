"""The scorer and the guards: exact values for the comparisons a tuning run decides on."""

from __future__ import annotations

import math

import pytest

from daemon.jobs.presets import preset, preset_for_model
from daemon.jobs.scoring import (
    Component,
    Guard,
    decide,
    effective_guards,
    guard_failures,
    median_metrics,
    percentile,
    score,
    score_range,
)

INTERACTIVE = (Component("single_tps", 0.5), Component("top_agg_tps", 0.2),
               Component("long_ttft_ms", 0.3, higher_is_better=False))
BASE = {"single_tps": 10.0, "top_agg_tps": 40.0, "long_ttft_ms": 200.0}


@pytest.mark.parametrize(("pct", "expected"), [(0, 15), (30, 20), (40, 20), (50, 35), (95, 50), (100, 50)])
def test_percentile_is_nearest_rank(pct: float, expected: float) -> None:
    assert percentile([50, 15, 40, 20, 35], pct) == expected


def test_p95_of_twenty_values_is_the_nineteenth() -> None:
    assert percentile([float(v) for v in range(1, 21)], 95) == 19.0


def test_median_metrics_per_metric_over_the_runs_that_have_it() -> None:
    runs = [{"a": 1.0, "b": 10.0}, {"a": 3.0}, {"a": 2.0, "b": 20.0}]
    assert median_metrics(runs) == {"a": 2.0, "b": 15.0}


def test_score_is_the_weighted_geometric_mean_with_latency_inverted() -> None:
    result = score(INTERACTIVE, {"single_tps": 20.0, "top_agg_tps": 40.0, "long_ttft_ms": 100.0}, BASE)
    assert result.value == pytest.approx(2 ** 0.8)
    assert result.ratios == {"single_tps": 2.0, "top_agg_tps": 1.0, "long_ttft_ms": 2.0}


def test_the_baseline_scores_one() -> None:
    assert score(INTERACTIVE, BASE, BASE).value == pytest.approx(1.0)


def test_weights_are_renormalised_over_components_measured_on_both_sides() -> None:
    missing_top = score(INTERACTIVE, {"single_tps": 20.0, "long_ttft_ms": 100.0}, BASE)
    assert missing_top.value == pytest.approx(2.0)
    no_long_baseline = score(INTERACTIVE, {"single_tps": 20.0, "top_agg_tps": 40.0, "long_ttft_ms": 100.0},
                             {"single_tps": 10.0, "top_agg_tps": 40.0})
    assert no_long_baseline.value == pytest.approx(2 ** (0.5 / 0.7))


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_broken_measurement_rejects_the_candidate(bad: float) -> None:
    result = score(INTERACTIVE, {**BASE, "single_tps": bad}, BASE)
    assert result.value is None and result.rejected is not None and "single_tps" in result.rejected


def test_nothing_measured_on_both_sides_cannot_be_scored() -> None:
    assert score(INTERACTIVE, {"other": 1.0}, BASE).value is None


def test_guards_name_what_a_candidate_breaks() -> None:
    guards = [Guard("single_ttft_p95_ms", "max", 1000.0, "short TTFT ≤ 1 s"),
              Guard("long_ttft_ms", "max_ratio", 1.25, "long TTFT ≤ baseline + 25 %"),
              Guard("objective_score", "min_ratio", 1.0, "objective ≥ baseline"),
              Guard("tool_valid", "min", 1.0, "tools valid")]
    base = {"single_ttft_p95_ms": 300.0, "long_ttft_ms": 200.0, "objective_score": 0.75, "tool_valid": 1.0}
    cand = {"single_ttft_p95_ms": 1200.0, "long_ttft_ms": 240.0, "objective_score": 0.5}
    assert guard_failures(guards, cand, base) == [
        "short TTFT ≤ 1 s: 1200 (limit 1000)", "objective ≥ baseline: 0.5 (limit 0.75)", "tools valid: not measured"]
    assert guard_failures(guards, base, base) == []


def test_an_absolute_guard_the_baseline_breaks_becomes_relative_and_is_noted() -> None:
    guards = [Guard("single_ttft_p95_ms", "max", 1000.0, "short TTFT ≤ 1 s"),
              Guard("tool_valid", "min", 1.0, "tools valid"),
              Guard("error_rate", "max", 0.0, "no failed requests")]
    effective, notes = effective_guards(guards, {"single_ttft_p95_ms": 1500.0, "tool_valid": 0.0, "error_rate": 0.0})
    assert [(g.kind, g.limit) for g in effective] == [("max_ratio", 1.0), ("min_ratio", 1.0), ("max", 0.0)]
    assert notes == ["the baseline breaks 'short TTFT ≤ 1 s' (1500): that guard is relative for this run",
                     "the baseline breaks 'tools valid' (0): that guard is relative for this run"]
    base = {"single_ttft_p95_ms": 1500.0, "tool_valid": 0.0, "error_rate": 0.0}
    assert guard_failures(effective, {"single_ttft_p95_ms": 1400.0, "tool_valid": 0.0, "error_rate": 0.0}, base) == []
    assert guard_failures(effective, {"single_ttft_p95_ms": 1600.0, "tool_valid": 0.0, "error_rate": 0.0}, base) == [
        "short TTFT ≤ 1 s → no worse than the baseline: 1600 (limit 1500)"]


def test_score_range_is_min_and_max_of_the_repetitions() -> None:
    reps = [{"single_tps": 11.0}, {"single_tps": 9.0}, {"single_tps": 12.0}]
    assert score_range((Component("single_tps", 1.0),), reps, {"single_tps": 10.0}) == pytest.approx((0.9, 1.2))


def test_a_winner_needs_the_gain_and_a_range_clear_of_the_baseline() -> None:
    decision = decide((0.98, 1.02), {"#1": (1.10, (1.05, 1.15)), "#2": (1.20, (1.00, 1.30))}, 0.05)
    assert (decision.winner, decision.gain) == ("#1", 1.10)
    assert decision.reason == "#1 beats the baseline by 10.0 %"


def test_no_winner_when_the_gain_is_small_or_the_ranges_overlap() -> None:
    decision = decide((0.98, 1.02), {"#3": (1.03, (1.03, 1.04)), "#4": (1.08, (1.01, 1.12))}, 0.05)
    assert decision.winner is None and decision.gain is None
    assert decision.reason == ("#3 scored 1.030, under the 1.05 needed; "
                               "#4's range (from 1.010) overlaps the baseline's (to 1.020)")


def test_presets_weights_sum_to_one_and_embeddings_models_use_embeddings() -> None:
    for name in ("interactive", "agents", "throughput", "long-documents", "embeddings"):
        assert sum(c.weight for c in preset(name).components) == pytest.approx(1.0)
    assert preset_for_model("interactive", embeddings=True).id == "embeddings"
    with pytest.raises(ValueError, match="embeddings on"):
        preset_for_model("embeddings", embeddings=False)
    with pytest.raises(ValueError, match="unknown preset"):
        preset("fastest")
