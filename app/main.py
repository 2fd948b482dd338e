"""``mirbadllm`` with no sub-command: the desktop app and its tray.

One instance per user and data directory; it finds the daemon (starting it when needed), then
runs every view-model and widget on one asyncio loop inside Qt's (``qasync.run``). Quitting the
app leaves the daemon and its models running; "Stop all models and quit" stops them first.

Before Qt is touched, ``app.qt_platform`` checks that the desktop platform plugin can load (a
missing ``libxcb-*`` library would make Qt abort); after the loop ends, ``teardown`` deletes every
Qt object in a fixed order while the interpreter is still whole, so exiting never crashes in
PySide6's finalisation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from pathlib import Path

_LOGGER = logging.getLogger(__name__)
APP_ID = "mirbadllm"  # the desktop entry's name and StartupWMClass (installers.linux_deb, installers.appimage)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbadllm", description="The MirbadLLM desktop app and tray.")
    parser.add_argument("--home", type=Path, help="the daemon's data directory (default: MIRBADLLM_HOME or the "
                                                  "platform's user data directory)")
    parser.add_argument("--no-daemon-start", action="store_true",
                        help="connect to a running daemon only; never start one")
    parser.add_argument("--minimized", action="store_true", help="start in the tray without opening the window")
    parser.add_argument("--demo", action="store_true", help="show the app over a demo fleet (the real daemon "
                                                             "with demo agents, in a temporary home)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, demo=None) -> int:  # type: ignore[no-untyped-def]
    """``demo``: what ``--demo`` runs over (``mirbadllm.demo.demo_fleet``; the launcher hands it in)."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    problem = platform_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.preferences import load_preferences
    from app.single_instance import SingleInstance
    from app.ui import theme
    from app.ui.icons import app_icon
    from daemon.api.locations import default_home

    home = (args.home or default_home()).expanduser()
    existing = QApplication.instance()
    owned = not isinstance(existing, QApplication)
    # argv[0] is X11's WM_CLASS instance name: "mirbadllm", as the desktop entry's StartupWMClass says,
    # not "__main__.py" (python -m app under `make run`)
    app = QApplication([APP_ID]) if owned else existing
    app.setApplicationName("MirbadLLM")
    app.setOrganizationName("MirbadLLM")
    app.setDesktopFileName(APP_ID)
    app.setQuitOnLastWindowClosed(False)  # the tray lives on when the window closes
    guard = SingleInstance(home)
    try:
        if guard.ask_existing_to_raise():
            print("MirbadLLM is already running: its window was brought forward.")
            return 0
        guard.listen()
        theme.apply(app, load_preferences().theme)  # type: ignore[arg-type]
        theme.follow_system(app)
        app.setWindowIcon(app_icon())
        return int(qasync.run(run_app(app, args, home, guard, demo)))
    finally:
        guard.close()
        guard.deleteLater()
        teardown(app, owned=owned)
        del app, existing, guard


def platform_problem() -> str | None:
    """Why Qt could not open a window here (the packages to install), or None. Only for the
    desktop plugins (QT_QPA_PLATFORM unset, xcb or wayland) and before any QApplication exists."""
    import os

    from app.qt_platform import check_this_machine

    if "PySide6.QtWidgets" in sys.modules:
        from PySide6.QtWidgets import QApplication

        if QApplication.instance() is not None:
            return None
    check = check_this_machine(os.environ)
    return None if check.ok else check.message()


def teardown(app, *, owned: bool) -> None:  # type: ignore[no-untyped-def]
    """Delete the app's Qt objects now, in a fixed order, while Python is whole: its windows, then
    pending deletions, then (when this process created it) the QApplication itself. Left to the
    interpreter's finalisation, Qt would destroy widgets whose Python overrides (hideEvent, ...) and
    slots run against half-torn-down modules: PySide6's ``Fatal Python error: none_dealloc``."""
    import gc
    import signal

    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QDialog, QMainWindow

    signal.signal(signal.SIGINT, signal.default_int_handler)  # no handler may call into a dead app
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for widget in app.topLevelWidgets():  # our windows; Qt's own popups and tooltips belong to others
        if isinstance(widget, (QMainWindow, QDialog)):
            widget.hide()
            widget.deleteLater()
    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    app.processEvents()
    gc.collect()
    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    if owned:
        app.shutdown()  # PySide6: destroys the QCoreApplication now, not at interpreter exit
    sys.stdout.flush()
    sys.stderr.flush()


def _quit_on_signals(quit_app):  # type: ignore[no-untyped-def]
    """Ctrl+C / SIGTERM quit cleanly. Python runs signal handlers only between bytecodes, so a
    timer wakes the interpreter while Qt waits in C++. Returns the timer (stopped at quit)."""
    import signal

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_args: quit_app())
    timer = QTimer(QApplication.instance())
    timer.timeout.connect(lambda: None)
    timer.start(300)
    return timer


async def _finished(dialog) -> int:  # type: ignore[no-untyped-def]
    """Show a dialog and wait for it without a nested event loop."""
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    dialog.finished.connect(lambda result: done.done() or done.set_result(result))
    dialog.open()
    return await done


async def connect(home: Path, args: argparse.Namespace, url_override: str):  # type: ignore[no-untyped-def]
    """A ``DaemonClient`` for a healthy daemon, or None when the user gave up."""
    from PySide6.QtWidgets import QDialog

    from app.bootstrap import BootstrapError, connect_daemon
    from app.ui.dialogs import DaemonFailedDialog
    from daemon.api.client import DaemonClient

    while True:
        try:
            conn = await connect_daemon(home, url_override=url_override, allow_start=not args.no_daemon_start)
        except BootstrapError as exc:
            _LOGGER.error("%s %s", exc.message, exc.advice)
            if await _finished(DaemonFailedDialog(exc)) == QDialog.DialogCode.Accepted:
                continue
            return None
        if conn.started_by_us:
            _LOGGER.info("started the daemon at %s", conn.url)
        return DaemonClient(conn.url, conn.token, client_name="app")  # the audit log's actor


async def _catch_up(ctx) -> None:  # type: ignore[no-untyped-def]
    """Restart an older daemon onto the version this app installed; say so in the status bar (the
    tray tells it too, from the Releases view-model's state)."""
    from app.context import Message

    line = await ctx.releases.catch_up()
    if line:
        ctx.messages.emit(Message(line, error=ctx.releases.state.value.error))


def _mark_shown() -> None:
    """For bench/app_responsiveness.py: write the time the window was first painted to the file
    named by ``MIRBADLLM_SHOWN_MARKER`` (nothing happens without it)."""
    import os
    import time

    from PySide6.QtCore import QTimer

    marker = os.environ.get("MIRBADLLM_SHOWN_MARKER")
    if marker:
        QTimer.singleShot(0, lambda: Path(marker).write_text(repr(time.time())))


WINDOW_MODULES = ("app.context", "app.ui.main_window", "app.ui.tray")


async def enter_while_loading(stack: contextlib.AsyncExitStack, fleet, modules=WINDOW_MODULES):  # type: ignore[no-untyped-def]
    """Enter ``fleet`` (the demo's context manager: its own thread) on ``stack`` and load ``modules``
    meanwhile, rather than before it starts or after it is up; what ``fleet`` yields."""
    import importlib

    entering = asyncio.ensure_future(stack.enter_async_context(fleet))
    await asyncio.sleep(0)  # the fleet's thread has started
    try:
        for name in modules:
            importlib.import_module(name)
    except BaseException:
        with contextlib.suppress(BaseException):
            await entering  # up, so the stack stops it
        raise
    return await entering


async def run_app(app, args: argparse.Namespace, home: Path, guard, demo=None) -> int:  # type: ignore[no-untyped-def]
    from app import loop_errors
    from app.preferences import load_preferences

    loop_errors.install(asyncio.get_running_loop())
    if args.demo:
        if demo is None:
            _LOGGER.error("the demo starts from the launcher: run `mirbadllm --demo`")
            return 2
        async with contextlib.AsyncExitStack() as stack:
            client, demo_home = await enter_while_loading(stack, demo())
            return await _run_window(app, args, demo_home, guard, client)
    client = await connect(home, args, load_preferences().daemon_url)
    if client is None:
        return 1
    return await _run_window(app, args, home, guard, client)


async def _run_window(app, args: argparse.Namespace, home: Path, guard, client) -> int:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QSystemTrayIcon

    from app.context import AppContext
    from app.preferences import load_preferences
    from app.ui import theme
    from app.ui.main_window import MainWindow
    from app.ui.tray import TrayController

    ctx = AppContext.create(client, home)
    url_override = "" if args.demo else load_preferences().daemon_url
    if not args.demo and not args.no_daemon_start:
        from app.bootstrap import connect_daemon, is_loopback

        if not url_override or is_loopback(url_override):
            async def start_daemon() -> None:
                await connect_daemon(home, url_override=url_override, allow_start=True)
                await ctx.fleet.resync()

            ctx.start_daemon = start_daemon
            from app.daemon_restart import DaemonRestarter

            ctx.releases.set_restarter(DaemonRestarter(home, url_override))
    quit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    tray_available = QSystemTrayIcon.isSystemTrayAvailable()
    window = MainWindow(ctx, apply_theme=lambda mode: theme.apply(app, mode), tray_available=tray_available)

    def quit_app() -> None:
        window.quitting = True
        if not quit_code.done():
            quit_code.set_result(0)

    async def stop_all_then_quit() -> None:
        await ctx.fleet.stop_all()
        quit_app()

    window.quit_requested = quit_app
    wake = _quit_on_signals(quit_app)
    tray = TrayController(ctx, open_window=window.bring_to_front, quit_app=quit_app,
                          stop_all_and_quit=lambda: ctx.act(stop_all_then_quit(), "Stopping every model"))
    tray.show()
    guard.activated.connect(window.bring_to_front)
    app.aboutToQuit.connect(quit_app)
    if not args.minimized or not tray_available:
        window.show()
        _mark_shown()
    ctx.start()
    daily_updates = None if args.demo else ctx.start_update_checks()
    if ctx.releases.restarter is not None:  # after an update: the daemon onto the installed version
        ctx.act(_catch_up(ctx))
    code = await quit_code
    if daily_updates is not None:
        daily_updates.cancel()
    # A fixed order: nothing that ticks or listens outlives what it points at.
    wake.stop()
    wake.deleteLater()
    app.aboutToQuit.disconnect(quit_app)
    tray.close()
    window.quitting = True
    window.close()
    await ctx.close()
    window.deleteLater()
    return code
