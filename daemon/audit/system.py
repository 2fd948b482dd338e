"""What the daemon does on its own, into the audit log as ``system``: evictions, idle unloads, crash
restarts, stall restarts and paused restarts.

Those parts already announce each on the event bus (``daemon.events``); ``record_system_events``
follows the bus (as the app does, by ``since``) and records one entry per such event, so the parts
need no recorder of their own. Entries name the model and say why, never a log line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from daemon.api.audit import ACTOR_SYSTEM, short
from daemon.api.models import Event
from daemon.audit.log import Recorder
from daemon.events import EventBus

_LOGGER = logging.getLogger(__name__)
POLL_S = 30.0


def _why(data: dict[str, Any], key: str) -> str:
    return short(data.get(key) or "", 120)


# event type -> (audit action, the entry's detail from the event's data)
SYSTEM_EVENTS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "model.evicted": ("model.evict", lambda d: f"to make room for {d.get('for_model')}: {_why(d, 'reason')}"),
    "model.unloaded": ("model.idle_unload", lambda d: f"idle {float(d.get('idle_s') or 0):.0f} s"),
    "model.crashed": ("model.crash_restart", lambda d: f"crash {d.get('crashes')} in a row, restart in "
                                                       f"{float(d.get('restart_in_s') or 0):.0f} s"),
    "model.stalled": ("model.stall_restart", lambda d: _why(d, "reason")),
    "model.restarts_paused": ("model.restarts_paused", lambda d: f"after {d.get('crashes')} crashes in a row"),
}


async def record_event(event: Event, audit: Recorder) -> None:
    known = SYSTEM_EVENTS.get(event.type)
    if known is not None:
        action, detail = known
        await audit.record(action, event.model or "", detail=detail(event.data), actor=ACTOR_SYSTEM)


async def record_system_events(events: EventBus, audit: Recorder, since: int, poll_s: float = POLL_S) -> None:
    """The events after ``since`` (the bus's ``last_id`` when the daemon spawns this), until cancelled
    or the bus closes (the daemon stops: its waits no longer wait)."""
    while not events.closed:
        page = await events.wait(since, poll_s)
        if not page.reset:
            for event in page.events:
                await record_event(event, audit)
        else:
            _LOGGER.warning("audit: the event ring ran past this reader; some system actions were not recorded")
        since = page.last_id
