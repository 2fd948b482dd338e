"""Fixtures of the app's tests: the real daemon (``real_daemon.py``), and for widget tests one qasync
loop on Qt's and the app's main window opened over a client."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).parent))

_LOGGER = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def real_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``(url, admin token)`` of a real daemon (``real_daemon.py``: no local agent), one per module;
    ``.deps`` / ``.call(work)`` reach its parts on its own loop."""
    from real_daemon import daemon_in_thread

    with daemon_in_thread(tmp_path_factory.mktemp("daemon")) as found:
        yield found


@pytest.fixture
async def client(real_daemon: Any) -> AsyncIterator[Any]:
    """The app's client of ``real_daemon``; a test file that needs another defines its own ``client``."""
    from real_daemon import app_client

    async with app_client(real_daemon) as app:
        yield app


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


@pytest.fixture
def open_main_window(qloop: asyncio.AbstractEventLoop, qapp: Any, qtbot: Any,
                     tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``open_main_window(client, *, nodes_loaded=False, size=None)``: the app's main window over
    ``client``, offscreen, in the light theme, shown once the first fleet snapshot is in (and with
    ``nodes_loaded`` the Nodes page's first list too); ``size`` is ``(width, height)``.

    Its context is ``win.ctx``. At teardown every window it opened stops its background work (nodes,
    charts, logs, the first-run card), closes as on quit and is deleted, so later tests stay quick.
    """
    from PySide6.QtCore import QEvent

    from app.context import AppContext
    from app.ui import theme
    from app.ui.main_window import MainWindow

    opened: list[MainWindow] = []

    def open_with(client: Any, *, nodes_loaded: bool = False, size: tuple[int, int] | None = None) -> MainWindow:
        if theme.current_name() != "light" or not qapp.styleSheet():
            theme.apply(qapp, "light")
        ctx = AppContext.create(client, tmp_path, prefs_path=tmp_path / "app.json", platform="linux",
                                host_refresh_s=3600)
        ctx.fleet.feed._poll_timeout = 5
        ctx.start()
        qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.loaded and (not nodes_loaded or ctx.nodes.state.value.loaded))
        win = MainWindow(ctx, apply_theme=lambda mode: theme.apply(qapp, mode))
        if size is not None:
            win.resize(*size)
        win.show()
        opened.append(win)
        return win

    yield open_with
    from daemon.api.client import DaemonClient

    for win in opened:
        ctx = win.ctx
        if isinstance(ctx.client, DaemonClient):  # a real daemon's: its feeds end, then its session
            closing = asyncio.ensure_future(ctx.close())
            qtbot.waitUntil(closing.done, timeout=10_000)
        ctx.nodes.close()
        ctx.node_charts.hide()
        ctx.logs.stop()
        ctx.charts.hide()
        ctx.first_run.close()
        win.quitting = True
        win.close()
        win.deleteLater()
    qapp.sendPostedEvents(None, QEvent.Type.DeferredDelete)
