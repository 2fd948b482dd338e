"""Figures for the Linux package: .deb size, installed size, launch time frozen vs from source,
and the time from `apt-get install` to an answer on /v1 with a local GGUF (needs root).

    python bench/package_figures.py dist/mirbadllm_0.1.0_amd64.deb GGUF
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(url: str, body: dict | None = None, timeout: float = 5) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_healthy(port: int, process: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            call(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the daemon exited") from None
            time.sleep(0.02)
    raise RuntimeError("no /healthz")


def daemon_start_s(argv: list[str]) -> float:
    """Seconds from exec to the daemon answering /healthz, with a fresh home."""
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        env = {**os.environ, "MIRBADLLM_HOME": home, "MIRBADLLM_NO_MDNS": "1"}
        started = time.monotonic()
        process = subprocess.Popen([*argv, "daemon", "--port", str(port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, process)
            return time.monotonic() - started
        finally:
            process.terminate()
            process.wait(30)


def app_start_s(argv: list[str], home: str) -> float:
    """Seconds from exec to the app's main window first painted (offscreen), against a running daemon."""
    marker = Path(home) / "shown"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "MIRBADLLM_SHOWN_MARKER": str(marker), "QT_QPA_PLATFORM": "offscreen",
           "MIRBADLLM_APP_CONFIG": str(Path(home) / "app-config.json")}
    started = time.time()
    app = subprocess.Popen([*argv, "--home", home, "--no-daemon-start"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() or not marker.read_text():
            if app.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the app did not show its window")
            time.sleep(0.01)
        return float(marker.read_text()) - started
    finally:
        app.terminate()
        app.wait(30)


def cli_start_s(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run([*argv, "ctl", "--help"], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> int:
    deb, gguf = Path(sys.argv[1]), Path(sys.argv[2])
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "purge", "-y", "-q", "mirbadllm"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)  # not installed: nothing to purge
    print(f".deb size: {deb.stat().st_size / 1e6:.1f} MB")
    started = time.monotonic()
    subprocess.run(["apt-get", "install", "-y", "-q", str(deb.absolute())], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    installed_at = time.monotonic()
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        denv = {**os.environ, "MIRBADLLM_HOME": home, "MIRBADLLM_NO_MDNS": "1"}
        daemon = subprocess.Popen(["/usr/bin/mirbadllm", "daemon", "--port", str(port)], env=denv,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, daemon)
            ctl = ["/usr/bin/mirbadllm", "ctl", "--url", f"http://127.0.0.1:{port}"]
            subprocess.run([*ctl, "models", "add", "gem", str(gguf), "--ctx-size", "1024", "--start-on-request"],
                           env=denv, check=True, stdout=subprocess.DEVNULL)
            call(f"http://127.0.0.1:{port}/v1/completions", {"model": "gem", "prompt": "Hi", "max_tokens": 1},
                 timeout=180)
            answered = time.monotonic()
            subprocess.run([*ctl, "models", "stop", "gem"], env=denv, stdout=subprocess.DEVNULL, check=True)
        finally:
            daemon.terminate()
            daemon.wait(30)
    du = subprocess.run(["du", "-sk", "/opt/mirbadllm"], capture_output=True, text=True, check=True).stdout.split()[0]
    print(f"installed size: {int(du) / 1024:.0f} MiB (/opt/mirbadllm)")
    print(f"apt-get install: {installed_at - started:.1f} s; install to first /v1 answer: "
          f"{answered - started:.1f} s (the model loaded on the first request)")
    frozen, source = ["/usr/bin/mirbadllm"], [sys.executable, "-m", "mirbadllm"]
    runs: dict[str, list[float]] = {"frozen daemon": [], "source daemon": [], "frozen ctl": [], "source ctl": [],
                                    "frozen app": [], "source app": []}
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        denv = {**os.environ, "MIRBADLLM_HOME": home, "MIRBADLLM_NO_MDNS": "1"}
        daemon = subprocess.Popen([*source, "daemon", "--home", home, "--port", str(port)], env=denv,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, daemon)
            for _ in range(5):  # interleaved, so both see the same machine
                runs["frozen daemon"].append(daemon_start_s(frozen))
                runs["source daemon"].append(daemon_start_s(source))
                runs["frozen ctl"].append(cli_start_s(frozen))
                runs["source ctl"].append(cli_start_s(source))
                runs["frozen app"].append(app_start_s(frozen, home))
                runs["source app"].append(app_start_s(source, home))
        finally:
            daemon.terminate()
            daemon.wait(30)
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:>14}: median {v * 1000:.0f} ms over {len(runs[k])} runs")
    print(f"daemon start, frozen ÷ source: {med['frozen daemon'] / med['source daemon']:.2f}")
    print(f"ctl start, frozen ÷ source: {med['frozen ctl'] / med['source ctl']:.2f}")
    print(f"app window shown, frozen ÷ source: {med['frozen app'] / med['source app']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
