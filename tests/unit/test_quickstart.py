"""``make run`` (mirbadllm/quickstart.py): what a newcomer sees when the app cannot open, and on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.qt_platform import check_platform
from mirbadllm import quickstart

ROOT = Path(__file__).resolve().parents[2]
LDD_MISSING = "\tlibxcb-icccm.so.4 => not found\n\tlibxcb-keysyms.so.1 => not found\n"


class FakeProcess:
    """A started process that has already exited with ``code``."""

    def __init__(self, code: int = 0) -> None:
        self.code = code
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = self.code
        return self.code


def test_missing_xcb_libraries_name_the_packages_and_the_daemon_serves_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started: list[Path] = []
    opened: list[Path] = []
    daemon = FakeProcess()

    async def not_running(_home: Path) -> bool:
        return False

    async def ready(_home: Path, _daemon: object) -> str:
        return "http://127.0.0.1:8484/v1"

    def start(home: Path) -> FakeProcess:
        started.append(home)
        return daemon

    def open_app(home: Path) -> FakeProcess:
        opened.append(home)
        return FakeProcess()

    def desktop() -> str | None:
        return check_platform({"xcb": LDD_MISSING}, {"DISPLAY": ":0"}).message()

    code = quickstart.run(quickstart.Setup(home=tmp_path, healthy=not_running, start_daemon=start,  # type: ignore[arg-type]
                                           wait_for_model=ready, desktop_problem=desktop, open_app=open_app))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert opened == [] and started == [tmp_path] and code == 0
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in out
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms" in out
    assert "MirbadLLM is serving gemma-3-270m at http://127.0.0.1:8484/v1" in out
    assert "Running the daemon alone in this terminal; it keeps serving" in out


# The real quickstart in a child process; the daemon is a sleeping stand-in (its pid in a file) and
# the model never becomes ready, so Ctrl-C arrives while `make run` waits, as it would for a newcomer.
DRIVER = textwrap.dedent("""
    import asyncio, signal, subprocess, sys
    from pathlib import Path
    from mirbadllm import quickstart

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores it)

    home, gui = Path(sys.argv[1]), sys.argv[2] == "gui"

    async def not_running(_home):
        return False

    def start(_home):
        daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (home / "daemon.pid").write_text(str(daemon.pid))
        return daemon

    async def never_ready(_home, _daemon):
        print("Starting gemma-3-270m ...", flush=True)
        await asyncio.Event().wait()

    sys.exit(quickstart.run(quickstart.Setup(
        home=home, healthy=not_running, start_daemon=start, wait_for_model=never_ready,
        desktop_problem=lambda: None if gui else "No display found.")))
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("mode", ["gui", "headless"])
def test_ctrl_c_ends_make_run_without_a_traceback_and_says_what_keeps_running(tmp_path: Path, mode: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), mode], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert child.stdout is not None
    seen = [child.stdout.readline()]
    while seen[-1] and "Starting gemma-3-270m" not in seen[-1]:
        seen.append(child.stdout.readline())
    assert "Starting gemma-3-270m" in seen[-1], seen
    os.killpg(child.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole foreground group
    daemon_pid = int((tmp_path / "daemon.pid").read_text())
    try:
        out, err = child.communicate(timeout=60)
        assert "Traceback" not in err, err
        assert child.returncode == 130
        if mode == "gui":  # the daemon started for the app outlives `make run`, and the message says so
            assert _alive(daemon_pid)
            assert "The daemon keeps running" in out and "mirbadllm ctl daemon stop" in out
        else:  # the daemon ran in this terminal: Ctrl-C stopped it; models keep running
            assert not _alive(daemon_pid)
            assert "Stopped the daemon" in out
        assert "mirbadllm ctl models stop gemma-3-270m" in out
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        if _alive(daemon_pid):
            os.kill(daemon_pid, signal.SIGKILL)
