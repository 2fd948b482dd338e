"""A task that fails where nobody awaits it ends up in the app's log, with its traceback."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from app import loop_errors


async def _broken_refresh() -> None:
    raise RuntimeError("daemon answered garbage")


def test_a_failed_background_task_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop_errors.install(loop, excepthook=False)
        caplog.set_level(logging.ERROR, logger="app.loop_errors")
        task = loop.create_task(_broken_refresh())
        loop.run_until_complete(asyncio.wait([task]))
        del task  # nobody awaits it: the loop reports it when the task is collected
        gc.collect()
    finally:
        loop.close()
    records = [r for r in caplog.records if r.name == "app.loop_errors"]
    assert len(records) == 1
    assert "daemon answered garbage" in records[0].getMessage()
    assert "_broken_refresh" in records[0].getMessage()
    assert records[0].exc_info is not None and records[0].exc_info[0] is RuntimeError


def test_an_uncaught_slot_error_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="app.loop_errors")
    try:
        raise ValueError("slot failed")
    except ValueError as exc:
        loop_errors.report_uncaught(type(exc), exc, exc.__traceback__)
    assert [r.getMessage() for r in caplog.records if r.name == "app.loop_errors"] == [
        "uncaught ValueError: slot failed"]
