"""One thing a tuning search varies, for any runtime: its values on top of the best configuration so far.

The search (``daemon.jobs.spaces``) steps one dimension at a time. What a step tries is the same for
every runtime: each value applied to the best settings, less the best itself and repeats. What differs
by runtime is said by its dimension class (``daemon.jobs.planner`` for llama.cpp,
``daemon.jobs.vllm_dimensions`` for vLLM): how an explicit value becomes a change, how a change is
applied, which configurations are the same, and how a change is named in the plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

_LOGGER = logging.getLogger(__name__)

S = TypeVar("S", bound=BaseModel)  # a runtime's settings
M = TypeVar("M")  # what the runtime's search knows of the node and the model


@dataclass(frozen=True)
class Dimension(Generic[S, M]):
    name: str
    goal: str
    tradeoff: str
    values: Callable[[S, M], list[dict[str, Any]]]

    def variants(self, best: S, machine: M, override: Sequence[Any] | None = None) -> list[tuple[str, S]]:
        """(label, settings) for each value on top of ``best``, minus ``best`` and repeats."""
        changes = [self.change(v, machine) for v in override] if override is not None else self.values(best, machine)
        out: list[tuple[str, S]] = []
        seen = [self.same_as(best)]
        for change in changes:
            candidate = self.apply(best, change)
            if self.same_as(candidate) not in seen:
                seen.append(self.same_as(candidate))
                out.append((self.describe(change), candidate))
        return out

    def change(self, value: Any, machine: M) -> dict[str, Any]:
        """An explicit value: a raw change (a dict) as it is, else the dimension's own field set to it."""
        return value if isinstance(value, dict) else {self.name: value}

    def apply(self, best: S, change: dict[str, Any]) -> S:
        return best.model_copy(update=change)

    def same_as(self, settings: S) -> S:
        """What two configurations are compared by: equal ones run the same way."""
        return settings

    def describe(self, change: dict[str, Any]) -> str:
        return ", ".join(f"{k}={'default' if v is None else v}" for k, v in change.items())
