"""The app's asyncio exception handler: a task that fails where nobody awaits it is logged.

View-models start background work with ``asyncio.ensure_future``; an exception in such a task
reaches no caller. The loop hands it to its exception handler (when the task is collected, or a
callback raises); qasync's own handler and ``@asyncSlot``'s ``sys.excepthook`` print it at best to
a console the desktop app does not have. ``install`` routes both into the app's log, with the
traceback and the task that failed.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from types import TracebackType
from typing import Any

_LOGGER = logging.getLogger(__name__)


def report_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Log one error the loop could not hand to anyone (an ``asyncio`` exception handler)."""
    message = context.get("message") or "unhandled error in the event loop"
    where = context.get("task") or context.get("future") or context.get("handle")
    exc = context.get("exception")
    details = f"{message} ({where!r})" if where is not None else message
    if isinstance(exc, BaseException):
        _LOGGER.error("%s: %s", details, exc, exc_info=(type(exc), exc, exc.__traceback__))
    else:
        _LOGGER.error("%s", details)


def report_uncaught(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """``sys.excepthook``: qasync's ``@asyncSlot`` hands a failed slot's exception here."""
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    _LOGGER.error("uncaught %s: %s", exc_type.__name__, exc, exc_info=(exc_type, exc, tb))


def install(loop: asyncio.AbstractEventLoop, *, excepthook: bool = True) -> None:
    """Report the loop's unhandled errors (and, with ``excepthook``, uncaught slot errors) in the log."""
    loop.set_exception_handler(report_loop_error)
    if excepthook:
        sys.excepthook = report_uncaught
