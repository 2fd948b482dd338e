"""``make run``: the product on its embedded default, from one command.

Starts the daemon (or finds the one running), waits for the default model to be ready, prints the
``/v1`` URL with a curl example, then opens the desktop app when it can (a display, PySide6, and
Qt's platform plugin with its system libraries; otherwise it says which packages are missing).
The daemon started for the app outlives it; without the app the daemon runs in this terminal until
Ctrl-C. Ctrl-C never prints a traceback: it says what keeps running and how to stop it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.locations import (
    LAUNCH_LOG,
    default_home,
    read_admin_token,
    read_daemon_url,
)
from daemon.api.models import ModelState

DEFAULT_MODEL = "gemma-3-270m"
WAIT_READY_S = 600.0


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


async def _healthy(home: Path) -> bool:
    client = DaemonClient(read_daemon_url(home), "")
    try:
        return await client.healthz()
    finally:
        await client.close()


async def wait_for_model(home: Path, daemon: subprocess.Popen[bytes] | None) -> str | None:
    """Wait for the daemon, then for the default model; return the API URL (None on failure)."""
    deadline = time.monotonic() + 60
    while not await _healthy(home):
        if daemon is not None and daemon.poll() is not None:
            print(f"The daemon exited with {daemon.returncode}; see {home / 'logs' / 'daemon.log'}")
            return None
        if time.monotonic() > deadline:
            print("The daemon did not answer within 60 s.")
            return None
        await asyncio.sleep(0.3)
    token = read_admin_token(home) or ""
    client = DaemonClient(read_daemon_url(home), token)
    try:
        status = await client.status()
        model = next((m for m in status.models if m.id == DEFAULT_MODEL), None)
        if model is None:
            print("The demo model is not registered; add one with `mirbadllm ctl models add`.")
            return status.daemon.api_url
        if model.state != ModelState.READY:
            print(f"Starting {DEFAULT_MODEL} ...", flush=True)
            if model.state in (ModelState.STOPPED, ModelState.FAILED):
                await client.start_model(DEFAULT_MODEL)
            ends = time.monotonic() + WAIT_READY_S
            since = status.last_event_id
            while time.monotonic() < ends:
                current = (await client.get_model(DEFAULT_MODEL)).status
                if current.state == ModelState.READY:
                    break
                if current.state == ModelState.FAILED:
                    print(f"{DEFAULT_MODEL} failed to start: {current.error}")
                    return status.daemon.api_url
                page = await client.events(since, timeout=5)
                since = page.last_id
        return status.daemon.api_url
    except DaemonError as exc:
        print(f"error: {exc.message}")
        return None
    finally:
        await client.close()


def print_ready(api_url: str) -> None:
    print(f"""
MirbadLLM is serving {DEFAULT_MODEL} at {api_url}

  curl {api_url}/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{DEFAULT_MODEL}", "prompt": "The three primary colours are", "max_tokens": 32}}'

Any OpenAI client works: base_url="{api_url}", api_key="unused" (unless keys are required).
""", flush=True)


STOP_DAEMON = "mirbadllm ctl daemon stop"
STOP_MODEL = f"mirbadllm ctl models stop {DEFAULT_MODEL}"


def desktop_problem() -> str | None:
    """Why the desktop app cannot open here (None when it can): no display, no PySide6, or Qt's
    platform plugin missing system libraries (with the packages to install)."""
    if not has_display():
        return "No display found."
    if importlib.util.find_spec("PySide6") is None:
        return "The desktop app is not installed (pip install 'mirbadllm[gui]')."
    from app.qt_platform import check_this_machine

    check = check_this_machine(os.environ)
    return None if check.ok else check.message()


def start_daemon(home: Path) -> subprocess.Popen[bytes]:
    """The daemon in its own session: a Ctrl-C here never reaches it half-started; this process
    decides what a Ctrl-C means for it (see ``run``). Its log goes to ``{home}/daemon.log``, not
    into this terminal, which is the user's again once ``make run`` returns."""
    (home / LAUNCH_LOG).parent.mkdir(parents=True, exist_ok=True)
    with open(home / LAUNCH_LOG, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "mirbadllm", "daemon", "--home", str(home)],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def open_app(home: Path) -> subprocess.Popen[bytes]:
    """The desktop app, in this terminal's process group: Ctrl-C reaches it and it quits cleanly."""
    return subprocess.Popen([sys.executable, "-m", "mirbadllm", "--home", str(home)])


@dataclass
class Setup:
    """What ``make run`` works with; tests replace the parts that start real processes."""

    home: Path
    healthy: Callable[[Path], Awaitable[bool]] = _healthy
    start_daemon: Callable[[Path], subprocess.Popen[bytes]] = start_daemon
    wait_for_model: Callable[[Path, subprocess.Popen[bytes] | None], Awaitable[str | None]] = wait_for_model
    desktop_problem: Callable[[], str | None] = desktop_problem
    open_app: Callable[[Path], subprocess.Popen[bytes]] = open_app


@dataclass
class _Run:
    """Who owns what, for the Ctrl-C message: the daemon we started (None: it was running) and
    whether it runs in this terminal (headless: Ctrl-C stops it) or beside the app (it stays)."""

    daemon: subprocess.Popen[bytes] | None = None
    foreground: bool = False
    app: subprocess.Popen[bytes] | None = None
    api_url: str = ""


def _stop(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    process.terminate()
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _interrupted(state: _Run) -> int:
    """Ctrl-C: end without a traceback and say what keeps running and how to stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    print(flush=True)
    if state.app is not None and state.app.poll() is None:
        try:  # it got the same Ctrl-C and quits by itself; give it time to close its window
            state.app.wait(15)
        except subprocess.TimeoutExpired:
            _stop(state.app, 5)
    where = f" at {state.api_url}" if state.api_url else ""
    if state.daemon is not None and state.foreground:
        print("Stopping the daemon ...", flush=True)
        _stop(state.daemon, 30)
        print(f"Stopped the daemon. Models it started keep running (`make run` or `mirbadllm daemon` "
              f"adopts them again; `{STOP_MODEL}` stops one while the daemon runs).")
    else:
        print(f"Stopped. The daemon keeps running{where}: `{STOP_DAEMON}` stops it. Its models keep "
              f"running too: `{STOP_MODEL}` stops one.")
    return 130


def run(setup: Setup) -> int:
    state = _Run()
    try:
        return _run(setup, state)
    except KeyboardInterrupt:
        return _interrupted(state)


def _run(setup: Setup, state: _Run) -> int:
    home = setup.home
    problem = setup.desktop_problem()
    if problem:
        print(problem)
    if not asyncio.run(setup.healthy(home)):
        state.daemon = setup.start_daemon(home)
        state.foreground = problem is not None
    api_url = asyncio.run(setup.wait_for_model(home, state.daemon))
    state.api_url = api_url or ""
    if api_url:
        print_ready(api_url)
    if problem is None:
        print("Opening the MirbadLLM app (the daemon keeps serving after you quit it).", flush=True)
        state.app = setup.open_app(home)
        code = state.app.wait()
        print(f"The app is closed; the daemon keeps serving. `{STOP_DAEMON}` stops it.")
        return code
    if state.daemon is None:
        print(f"The daemon was already running and keeps serving: `{STOP_DAEMON}` stops it.")
        return 0
    print("Running the daemon alone in this terminal; it keeps serving until Ctrl-C stops it "
          "(models keep running).", flush=True)
    return state.daemon.wait()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run(Setup(home=default_home()))


if __name__ == "__main__":
    sys.exit(main())
