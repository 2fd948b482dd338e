"""Slow models: a model that answers far slower than its own history is flagged, from the access log.

The router reports each completed answer's decode speed (tokens after the first, per second after
the first token) when no other request of that model was in flight at its end: a slot shared with
others is slower by design and says nothing about the runtime. A model is flagged Slow when the
median of its last ``RECENT`` such answers falls below ``SLOW_BELOW`` times the median of its
history (at least ``MIN_HISTORY`` answers), and no longer once they are back above ``BACK_ABOVE``
of it. A start forgets the history: another configuration may well be slower.
"""

from __future__ import annotations

from collections import deque
from statistics import median

RECENT = 3
MIN_HISTORY = 10
HISTORY = 50
SLOW_BELOW = 0.4
BACK_ABOVE = 0.7
MIN_TOKENS = 8  # shorter answers' speeds are mostly noise


class SpeedWatch:
    def __init__(self) -> None:
        self._history: dict[str, deque[float]] = {}
        self._recent: dict[str, deque[float]] = {}
        self.slow: dict[str, str] = {}  # model id -> why it is flagged Slow

    def observe(self, model_id: str, tokens: int | None, decode_s: float | None) -> bool:
        """One completed answer that ran alone; True when the model's Slow flag changed."""
        if not tokens or tokens < MIN_TOKENS or not decode_s or decode_s <= 0:
            return False
        rate = (tokens - 1) / decode_s
        recent = self._recent.setdefault(model_id, deque(maxlen=RECENT))
        history = self._history.setdefault(model_id, deque(maxlen=HISTORY))
        recent.append(rate)
        if len(history) < MIN_HISTORY or len(recent) < RECENT:
            history.append(rate)
            return False
        usual, now = median(history), median(recent)
        was = model_id in self.slow
        if now < SLOW_BELOW * usual:
            self.slow[model_id] = (f"answers at {now:.1f} tokens/s, {now / usual:.2f}x its usual {usual:.1f} "
                                   f"(the last {RECENT} answers)")
            return not was
        if was and now < BACK_ABOVE * usual:
            return False  # recovering, not yet back
        self.slow.pop(model_id, None)
        history.append(rate)  # a normal answer: part of what is usual
        return was

    def forget(self, model_id: str) -> bool:
        """The model (re)starts: its history no longer applies. True if it was flagged."""
        self._history.pop(model_id, None)
        self._recent.pop(model_id, None)
        return self.slow.pop(model_id, None) is not None
