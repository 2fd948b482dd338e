"""How the desktop app feels: launch time, idle memory, and event-loop lag while it works.

1. Launch to window shown: ``mirbadllm`` started as a process against a running daemon, until its
   main window is first painted (median of 5).
2. RSS after one minute idle (the window open, the fleet feed and host gauges running).
3. Event-loop lag p99 while a chat streams in the Playground and the Charts tab refreshes at 1 Hz:
   a probe task sleeps 5 ms at a time on the app's one asyncio loop and records how late it wakes.

The daemon runs the fake runtime streaming 400 tokens at 100 tokens/s, so the figures are the
app's own cost. Rendering is offscreen here (no display on the bench machine).

    .venv/bin/python bench/app_responsiveness.py [--idle-seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _harness import ROOT, BenchDaemon, ensure_ready, percentile, start_daemon

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(ROOT))
from daemon.api.client import DaemonClient
from daemon.api.locations import read_admin_token
from daemon.api.models import ModelDefinition
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes


def launch_once(home: Path, marker: Path) -> tuple[float, subprocess.Popen[bytes]]:
    marker.unlink(missing_ok=True)
    env = {**os.environ, "MIRBADLLM_SHOWN_MARKER": str(marker), "PYTHONPATH": str(ROOT)}
    started = time.time()
    with open(home / "app-stderr.log", "wb") as stderr:  # read by stop(): a crash at exit is reported
        proc = subprocess.Popen([sys.executable, "-m", "mirbadllm", "--home", str(home), "--no-daemon-start"],
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the app did not show its window")
        time.sleep(0.01)
    return float(marker.read_text()) - started, proc


def stop(proc: subprocess.Popen[bytes], home: Path) -> None:
    """SIGTERM, the app's own quit path; an exit other than 0 or a fatal error is reported."""
    proc.terminate()
    try:
        code = proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    stderr = (home / "app-stderr.log").read_text(errors="replace")
    if code != 0 or "Fatal Python error" in stderr:
        print(f"  warning: the app exited with {code}: {stderr.strip().splitlines()[-1:] or ''}")


def loop_lag(home: Path, model: str, seconds: float) -> list[float]:
    """In-process: the real window and view-models on one qasync loop, a chat streaming."""
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.context import AppContext
    from app.ui.main_window import MainWindow
    from daemon.api.client import DaemonClient
    from daemon.api.locations import read_admin_token, read_daemon_url

    app = QApplication.instance() or QApplication([])
    lags: list[float] = []

    async def run() -> None:
        ctx = AppContext.create(DaemonClient(read_daemon_url(home), read_admin_token(home) or ""), home)
        window = MainWindow(ctx, apply_theme=lambda mode: None)
        window.resize(1280, 800)
        window.show()
        ctx.start()
        while not ctx.playground.state.value.models:
            await asyncio.sleep(0.05)
        window.open_model(model)
        ctx.charts.show(model, "5m")
        stop_at = time.monotonic() + seconds

        async def charts_1hz() -> None:
            while time.monotonic() < stop_at:
                await ctx.charts.refresh()
                await asyncio.sleep(1.0)

        async def chats() -> None:
            while time.monotonic() < stop_at:
                task = ctx.playground.send("Tell me a long story.")
                if task is not None:
                    await task

        async def probe() -> None:
            while time.monotonic() < stop_at:
                before = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append(max(0.0, time.perf_counter() - before - 0.005))

        await asyncio.gather(charts_1hz(), chats(), probe())
        pieces = sum(len(m.content) for m in ctx.playground.state.value.messages if m.role == "assistant")
        print(f"  (streamed {pieces} characters into the Playground during the probe)")
        window.hide()  # closing the last window would quit Qt's loop under the await below
        await ctx.close()

    from app.main import teardown

    qasync.run(run())
    teardown(app, owned=True)  # Qt goes now, in order, not during the interpreter's finalisation
    return lags


async def measure_process(args: argparse.Namespace) -> tuple[BenchDaemon, list[float], int]:
    fake = write_fake_runtime(Path(tempfile.mkdtemp()), token_delay_s=0.01, tokens=400)
    d = await start_daemon("--llama-server", str(fake), seed_demo=False)
    model_file = d.home / "fake.gguf"
    model_file.write_bytes(gguf_bytes())  # a tiny valid GGUF: agents read the header before a start
    await ensure_ready(d, ModelDefinition(id="chat", served_name="chat", model_path=str(model_file)), "chat")
    await d.client.close()
    marker = d.home / "shown"
    times = []
    for _ in range(5):
        seconds, proc = launch_once(d.home, marker)
        times.append(seconds)
        stop(proc, d.home)
    _, proc = launch_once(d.home, marker)
    await asyncio.sleep(args.idle_seconds)
    rss = psutil.Process(proc.pid).memory_info().rss
    stop(proc, d.home)
    return d, times, rss


async def shutdown(d: BenchDaemon) -> None:
    d.client = DaemonClient(f"http://127.0.0.1:{d.port}", read_admin_token(d.home) or "")
    await d.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    args = parser.parse_args()
    d, times, rss = asyncio.run(measure_process(args))
    try:
        print(f"launch to window shown: median {statistics.median(times):.2f} s "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)}; target <= 2 s)")
        print(f"RSS after {args.idle_seconds:.0f} s idle: {rss / 1e6:.0f} MB (target <= 250 MB)")
        lags = loop_lag(d.home, "chat", args.lag_seconds)
        print(f"event-loop lag while streaming + charts at 1 Hz: p50 {percentile(lags, 50) * 1000:.1f} ms, "
              f"p99 {percentile(lags, 99) * 1000:.1f} ms over {len(lags)} probes (target p99 <= 50 ms)")
    finally:
        asyncio.run(shutdown(d))


if __name__ == "__main__":
    main()
