"""Per-key limits on ``/v1``: requests per minute and tokens per day, refused with 429 and ``Retry-After``.

Requests per minute is a sliding-window log: each key keeps the times of the requests it was let
through in the last 60 seconds (in memory, so a restart forgets them), and a request is refused
while that window already holds ``requests_per_minute`` of them; ``Retry-After`` is when the oldest
of them leaves the window. Only admitted requests enter the window, so a client that keeps retrying
while refused does not push its own wait further out. Exact (no bucket edges), and small: at most
``requests_per_minute`` times per key.

Tokens per day counts the UTC day (00:00 to 24:00 UTC): ``KeyStore.count_use`` adds each answer's
prompt plus completion tokens, as the access log read them, to its key's day (saved in keys.json
with the key's other counts). A key whose day already holds ``tokens_per_day`` tokens is refused
until the next UTC midnight, which ``Retry-After`` names; the request that crosses the limit is
answered (its tokens are known only once it is), so a day may end a little over its limit.

Both are checked at the start of the router's ``proxy``, before the body is read, so a refusal costs
the runtime nothing; it still leaves its access-log row (code ``rate_limited`` or
``tokens_per_day_exceeded``, type ``rate_limit_error``). ``/v1/models`` is not limited.
"""

from __future__ import annotations

import math
from collections import deque
from datetime import UTC, datetime, timedelta

from daemon.api.models import ApiKeyLimits
from daemon.errors import DaemonProblem

WINDOW_S = 60.0


def utc_day(now: float) -> str:
    """The UTC day ``now`` falls in, as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(now, UTC).date().isoformat()


def seconds_to_next_utc_day(now: float) -> float:
    moment = datetime.fromtimestamp(now, UTC)
    midnight = datetime(moment.year, moment.month, moment.day, tzinfo=UTC) + timedelta(days=1)
    return midnight.timestamp() - now


class RequestWindows:
    """The sliding 60-second window of admitted requests, per key."""

    def __init__(self) -> None:
        self._times: dict[str, deque[float]] = {}

    def _window(self, key_id: str, now: float) -> deque[float]:
        times = self._times.setdefault(key_id, deque())
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        return times

    def count(self, key_id: str, now: float) -> int:
        """Requests admitted for ``key_id`` in the 60 seconds before ``now``."""
        if key_id not in self._times:
            return 0
        return len(self._window(key_id, now))

    def admit(self, key_id: str, limit: int | None, now: float) -> float | None:
        """Let one request through (None), or the seconds until the window has room for it."""
        times = self._window(key_id, now)
        if limit is not None and len(times) >= limit:
            return max(1.0, math.ceil(times[-limit] + WINDOW_S - now))
        times.append(now)
        return None

    def forget(self, key_id: str) -> None:
        self._times.pop(key_id, None)


def check(key_id: str, limits: ApiKeyLimits, windows: RequestWindows, tokens_today: int, now: float) -> None:
    """Let one request of ``key_id`` through, or raise the 429 that says how long to wait. The
    day's tokens are checked first, so a refused request takes no place in the minute's window."""
    if limits.tokens_per_day is not None and tokens_today >= limits.tokens_per_day:
        wait = seconds_to_next_utc_day(now)
        raise DaemonProblem(429, "tokens_per_day_exceeded",
                            f"This API key has used its {limits.tokens_per_day} tokens for today (UTC); "
                            f"try again in {retry_after_text(wait)}.", retry_after=math.ceil(wait))
    wait_rpm = windows.admit(key_id, limits.requests_per_minute, now)
    if wait_rpm is not None:
        raise DaemonProblem(429, "rate_limited",
                            f"This API key is limited to {limits.requests_per_minute} requests per minute; "
                            f"try again in {retry_after_text(wait_rpm)}.", retry_after=wait_rpm)


def retry_after_text(seconds: float) -> str:
    """A wait for a person: "12 s", "3 min", "5 h 20 min"."""
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
