"""The Slow flag from a model's own history of decode speeds."""

from __future__ import annotations

from daemon.models.speed import MIN_HISTORY, SpeedWatch


def test_a_model_far_slower_than_its_history_is_flagged_and_unflagged_when_back() -> None:
    watch = SpeedWatch()
    for _ in range(MIN_HISTORY + 2):
        assert watch.observe("m", 41, 2.0) is False  # 20 tokens/s, its usual
    assert "m" not in watch.slow
    changes = [watch.observe("m", 41, 10.0) for _ in range(3)]  # 4 tokens/s: flagged once most of the last 3 are
    assert changes == [False, True, False] and "4.0 tokens/s" in watch.slow["m"] and "0.20x" in watch.slow["m"]
    assert [watch.observe("m", 41, 2.0) for _ in range(3)] == [False, True, False]  # the median is back
    assert "m" not in watch.slow


def test_short_answers_and_a_young_history_flag_nothing() -> None:
    watch = SpeedWatch()
    for _ in range(MIN_HISTORY - 3):
        watch.observe("m", 41, 2.0)
    assert [watch.observe("m", 41, 20.0) for _ in range(3)] == [False, False, False]  # not enough history yet
    watch = SpeedWatch()
    for _ in range(MIN_HISTORY + 3):
        watch.observe("m", 41, 2.0)
    assert [watch.observe("m", 3, 30.0) for _ in range(5)] == [False] * 5  # 3 tokens: noise, ignored
    assert watch.observe("m", 41, None) is False


def test_a_start_forgets_the_history() -> None:
    watch = SpeedWatch()
    for _ in range(MIN_HISTORY + 3):
        watch.observe("m", 41, 2.0)
    for _ in range(3):
        watch.observe("m", 41, 10.0)
    assert watch.forget("m") is True and "m" not in watch.slow
    assert [watch.observe("m", 41, 10.0) for _ in range(3)] == [False] * 3  # the slower speed is the new usual
