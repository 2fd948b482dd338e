"""Fixtures of the app's tests: the fake daemon, and for widget tests one qasync loop on Qt's."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).parent))

from fake_daemon import FakeDaemonClient, definition

_LOGGER = logging.getLogger(__name__)


@pytest.fixture
def fake() -> FakeDaemonClient:
    return FakeDaemonClient([definition("alpha", tags=["chat"]), definition("beta", served_name="Beta-7B",
                                                                              tags=["code", "chat"])])


@pytest.fixture(autouse=True)
def _app_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read or write the developer's own app preferences or autostart entry."""
    monkeypatch.setenv("MIRBADLLM_APP_CONFIG", str(tmp_path / "app-config.json"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))


@pytest.fixture
def qloop(qapp) -> Iterator[asyncio.AbstractEventLoop]:  # type: ignore[no-untyped-def]
    """A qasync loop that runs inside Qt's own event processing, as in the app.

    ``already_running`` makes asyncio see it as the running loop, so tasks advance whenever
    ``qtbot.waitUntil`` / ``waitSignal`` spin Qt's events.
    """
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    executor = qasync.QThreadExecutor(1)  # ours, so that teardown can join its thread
    loop.set_default_executor(executor)
    asyncio.set_event_loop(loop)
    yield loop
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    deadline = 200
    while deadline and any(not t.done() for t in tasks):
        qapp.processEvents()
        deadline -= 1
    executor.shutdown(wait=True)
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(None)
