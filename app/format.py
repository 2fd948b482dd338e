"""How figures read in the app: bytes, durations, ages, states. Pure functions."""

from __future__ import annotations

import time

from daemon.api.models import ModelState

STATE_TEXT = {
    ModelState.READY: "Ready", ModelState.STARTING: "Starting", ModelState.STOPPING: "Stopping",
    ModelState.STOPPED: "Stopped", ModelState.FAILED: "Failed",
}


def busy_text(busy: str | None) -> str | None:
    """What a job holding a model is called on its badge: "tuning (job x)" -> "Tuning"."""
    return busy.split(" ", 1)[0].capitalize() if busy else None


def size(n: float | None) -> str:
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(max(0, seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {s} s"
    return f"{s} s"


def uptime(started_at: float | None, now: float | None = None) -> str:
    if started_at is None:
        return "—"
    return duration((now or time.time()) - started_at)


def ago(ts: float | None, now: float | None = None) -> str:
    """Coarse: '5 min ago', '3 h ago', '2 d ago'."""
    if ts is None:
        return "never"
    s = max(0.0, (now or time.time()) - ts)
    if s < 60:
        return "just now"
    for unit, size_s in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size_s:
            return f"{int(s // size_s)} {unit} ago"
    return "just now"


def when(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"
