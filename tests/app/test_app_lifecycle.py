"""The app as a process: it opens (offscreen, over ``mirbadllm.demo``: the real daemon with demo
agents), quits through its own quit path, and exits 0 without PySide6's finalisation crash."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

# Runs the real ``mirbadllm`` entry point; once the window is painted (the bench's marker file),
# Ctrl-C arrives as it would from a terminal. After main() returns, it reports whether Qt was torn
# down before the interpreter finalises (that is where PySide6 crashed).
DRIVER = textwrap.dedent("""
    import os, signal, sys, threading
    from pathlib import Path

    marker = Path(os.environ["MIRBADLLM_SHOWN_MARKER"])
    shown = threading.Event()

    def ctrl_c_once_shown():
        while not shown.wait(0.05):
            if marker.exists() and marker.read_text():
                os.kill(os.getpid(), signal.SIGINT)
                return

    threading.Thread(target=ctrl_c_once_shown, daemon=True).start()
    from mirbadllm.__main__ import main
    code = main(sys.argv[1:])
    shown.set()
    from PySide6.QtWidgets import QApplication
    print("qt left after main:", QApplication.instance() is not None, flush=True)
    sys.exit(code)
""")


def run_app(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The app run to its end; one still running after 120 s is killed with everything it started (the
    demo's agent and runtime outlive a killed app by design), and the test fails."""
    import psutil

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT),
           "MIRBADLLM_SHOWN_MARKER": str(tmp_path / "shown"),
           "MIRBADLLM_APP_CONFIG": str(tmp_path / "app-config.json"),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    argv = [sys.executable, "-X", "faulthandler", "-c", DRIVER, *args]
    with subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as app:
        try:
            out, err = app.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for process in [*psutil.Process(app.pid).children(recursive=True), psutil.Process(app.pid)]:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            out, err = app.communicate()
            pytest.fail(f"the app did not quit within 120 s:\n{err}")
    return subprocess.CompletedProcess(argv, app.returncode, out, err)


def test_ctrl_c_quits_the_demo_app_cleanly_and_tears_qt_down(tmp_path: Path) -> None:
    done = run_app(tmp_path, "--demo", "--home", str(tmp_path / "home"))
    assert (tmp_path / "shown").exists(), done.stderr
    assert "Fatal Python error" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert "qt left after main: False" in done.stdout, done.stdout + done.stderr


def test_the_app_alone_exits_with_a_message_when_it_cannot_open_a_window(tmp_path: Path) -> None:
    """Without a display (and with Qt left to choose its plugin), ``mirbadllm`` says why and exits
    non-zero instead of Qt's "could not connect to display" abort."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(PYTHONPATH=str(ROOT), MIRBADLLM_APP_CONFIG=str(tmp_path / "app-config.json"))
    done = subprocess.run([sys.executable, "-m", "mirbadllm", "--demo", "--home", str(tmp_path / "home")],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "No display found" in done.stderr
    assert "Aborted" not in done.stderr and "could not connect to display" not in done.stderr


def test_the_app_alone_says_why_xcb_cannot_start_instead_of_aborting(tmp_path: Path) -> None:
    """DISPLAY names a display nobody serves (and, on a machine without them, Qt's xcb plugin lacks
    system libraries): ``mirbadllm`` says so, with the packages to install, and exits 1."""
    from app.qt_platform import check_this_machine, display_answers

    unserved = next(f":{n}" for n in range(700, 800) if display_answers("xcb", {"DISPLAY": f":{n}"}) is False)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=unserved, PYTHONPATH=str(ROOT), MIRBADLLM_APP_CONFIG=str(tmp_path / "app-config.json"))
    check = check_this_machine(env)
    assert not check.ok
    done = subprocess.run([sys.executable, "-m", "mirbadllm", "--demo", "--home", str(tmp_path / "home")],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "The desktop app cannot start" in done.stderr
    if check.missing:
        assert f"sudo apt install {' '.join(check.debian_packages)}" in done.stderr
    assert "Aborted" not in done.stderr and "no Qt platform plugin could be initialized" not in done.stderr
