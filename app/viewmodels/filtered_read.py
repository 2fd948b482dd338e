"""``read_filtered``: one read of a filtered list (the audit log, the request log) into its state.

The state is a frozen dataclass with ``filters``, ``loading`` and ``error``. The read is made with
the filters as they are; its failure is shown as the state's ``error``; and an answer that comes
back after the filters changed is dropped (the read for the new filters is on its way)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError

S = TypeVar("S", bound=Any)
R = TypeVar("R")


async def read_filtered(state: Observable[S], read: Callable[[S], Awaitable[R]]) -> tuple[S, R] | None:
    """``read`` with the state as it is now (marked loading); the state after it and its answer, or
    None when it failed (the state says why) or the filters changed meanwhile."""
    asked = state.value
    state.set(replace(asked, loading=True))
    try:
        answer = await read(asked)
    except DaemonError as exc:
        state.set(replace(state.value, loading=False, error=exc.message))
        return None
    now = state.value
    if now.filters != asked.filters:
        return None  # the filters changed while this was read: their own read is on its way
    return now, answer
