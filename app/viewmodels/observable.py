"""The one push primitive of the view-models: a value that tells its subscribers when it changes.

Qt-free on purpose: widgets subscribe with a plain callable, tests subscribe with a list's
``append``. Callbacks run synchronously on the asyncio loop (which, in the app, is Qt's loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")

Unsubscribe = Callable[[], None]


class Emitter(Generic[T]):
    """Fire-and-forget notifications (a model became ready, a line of log arrived)."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[T], None]] = []

    def subscribe(self, callback: Callable[[T], None]) -> Unsubscribe:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, value: T) -> None:
        for callback in list(self._subscribers):
            try:
                callback(value)
            except Exception:
                _LOGGER.exception("subscriber %r failed", callback)


class Observable(Emitter[T]):
    """A current value (an immutable snapshot) plus change notifications."""

    def __init__(self, value: T) -> None:
        super().__init__()
        self._value = value

    @property
    def value(self) -> T:
        return self._value

    def set(self, value: T) -> None:
        if value is self._value or value == self._value:
            return
        self._value = value
        self.emit(value)

    def subscribe(self, callback: Callable[[T], None], *, now: bool = False) -> Unsubscribe:
        """Subscribe; with ``now`` the callback also gets the current value at once."""
        unsubscribe = super().subscribe(callback)
        if now:
            callback(self._value)
        return unsubscribe
