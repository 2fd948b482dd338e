"""The suite's correctness checks: tool-call arguments against their schema, objective answers."""

from __future__ import annotations

import random

from daemon.jobs.checks import judge_tool_call
from daemon.jobs.workloads import (
    OBJECTIVE_QUESTIONS,
    TOOL_CASES,
    chat_prompt,
    long_prompt,
    validate,
)

WEATHER, TIME, SEARCH = TOOL_CASES


def test_schema_subset_types_required_enum_items_and_closed_objects() -> None:
    assert validate({"city": "Paris", "unit": "celsius"}, WEATHER.schema) == []
    assert validate({"unit": "kelvin", "wind": True}, WEATHER.schema) == [
        "arguments.city: required", "arguments.wind: not allowed",
        "arguments.unit: 'kelvin' is not one of ['celsius', 'fahrenheit']"]
    assert validate({"query": "solar", "limit": True, "tags": ["a", 3]}, SEARCH.schema) == [
        "arguments.limit: expected integer, got bool", "arguments.tags[1]: expected string, got int"]
    assert validate([], WEATHER.schema) == ["arguments: expected object, got list"]


def test_a_tool_without_properties_takes_an_empty_object() -> None:
    assert judge_tool_call(TIME, [{"name": "get_time", "arguments": ""}]) is None
    assert judge_tool_call(TIME, [{"name": "get_time", "arguments": "{}"}]) is None


def test_tool_calls_are_judged_by_name_json_and_schema() -> None:
    assert judge_tool_call(WEATHER, []) == "no tool call"
    assert judge_tool_call(WEATHER, [{"name": "get_time", "arguments": "{}"}]) == "called 'get_time', wanted 'get_weather'"
    assert judge_tool_call(WEATHER, [{"name": "get_weather", "arguments": "{city"}]).startswith("arguments are not JSON")
    assert judge_tool_call(WEATHER, [{"name": "get_weather", "arguments": '{"unit": "celsius"}'}]) == \
        "arguments.city: required"
    assert judge_tool_call(WEATHER, [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]) is None


def test_objective_answers_are_matched_by_regex() -> None:
    seven_plus_five, capital = OBJECTIVE_QUESTIONS[0], OBJECTIVE_QUESTIONS[1]
    assert seven_plus_five.answer.search("The answer is 12.")
    assert not seven_plus_five.answer.search("112")
    assert capital.answer.search("PARIS")


def test_prompts_are_distinct_per_request_and_long_prompts_cold_per_run() -> None:
    assert chat_prompt(0, "r0") != chat_prompt(3, "r0") and chat_prompt(0, "r0") != chat_prompt(0, "r1")
    rng = random.Random(7)
    first, second = long_prompt(300, rng), long_prompt(300, rng)
    assert first != second  # a fresh random prefix each time: no cache hit on the cold measurement
    assert first.split(".\n\n", 1)[1] == second.split(".\n\n", 1)[1]  # the reusable document is the same
    assert len(first.split()) == 24 + 200 + 7
