"""Correctness checks of the suite: tool calls that validate against their schema, objective answers.

Both run at temperature 0 without ``ignore_eos`` (the model decides when it is done) and are
scored, never timed: a configuration that generates faster but answers worse must not win.
"""

from __future__ import annotations

import json

from daemon.api.jobs import CheckResult
from daemon.jobs.calls import RuntimeTarget, timed_chat
from daemon.jobs.workloads import OBJECTIVE_QUESTIONS, TOOL_CASES, ToolCase, validate

TOOL_MAX_TOKENS = 96
ANSWER_MAX_TOKENS = 24


def judge_tool_call(case: ToolCase, calls: list[dict[str, str]]) -> str | None:
    """None when the first call names the case's tool with arguments valid against its schema."""
    if not calls:
        return "no tool call"
    call = calls[0]
    if call.get("name") != case.name:
        return f"called {call.get('name')!r}, wanted {case.name!r}"
    raw = call.get("arguments") or "{}"
    try:
        arguments = json.loads(raw)
    except ValueError:
        return f"arguments are not JSON: {raw[:80]!r}"
    errors = validate(arguments, case.schema)
    return "; ".join(errors) if errors else None


async def run_tool_checks(target: RuntimeTarget, cases: int) -> CheckResult:
    passed = 0
    details: list[str] = []
    for case in TOOL_CASES[:cases]:
        timing = await timed_chat(target, [{"role": "user", "content": case.prompt}], TOOL_MAX_TOKENS,
                                  ignore_eos=False, tools=[case.tool])
        problem = timing.error if not timing.ok and not timing.tool_calls else judge_tool_call(case, timing.tool_calls)
        if problem is None:
            passed += 1
            details.append(f"{case.name}: valid")
        else:
            details.append(f"{case.name}: {problem}")
    return CheckResult(total=len(TOOL_CASES[:cases]), passed=passed, details=details)


async def run_objective(target: RuntimeTarget, questions: int) -> CheckResult:
    passed = 0
    details: list[str] = []
    for question in OBJECTIVE_QUESTIONS[:questions]:
        timing = await timed_chat(target, [{"role": "user", "content": question.prompt}], ANSWER_MAX_TOKENS,
                                  ignore_eos=False)
        answer = timing.text.strip().replace("\n", " ")[:80]
        right = timing.ok and question.answer.search(timing.text) is not None
        passed += right
        details.append(f"{'✓' if right else '✗'} {question.prompt} → {answer or timing.error or '(nothing)'}")
    return CheckResult(total=len(OBJECTIVE_QUESTIONS[:questions]), passed=passed, details=details)
