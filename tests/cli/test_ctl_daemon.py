"""``mirbadllm ctl daemon stop``: a real daemon process goes away, its models stay and are adopted by
the next daemon; ``--stop-models`` stops them too."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import pytest

from daemon.api.client import DaemonClient
from daemon.api.locations import read_admin_token
from daemon.api.models import ModelState
from mirbadllm import ctl
from tests.daemon.harness import model

ROOT = Path(__file__).resolve().parents[2]


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    """Wait for a condition of another process, which sends us no event."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def daemon_process(home: Path, runtime: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, DaemonClient]]:
    log = open(home.parent / f"daemon-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115, ASYNC230 - closed below
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirbadllm", "daemon", "--home", str(home), "--port", "0", "--no-demo",
        "--llama-server", str(runtime), "--telemetry-interval", "0.5", cwd=ROOT, stdout=log, stderr=log)
    info = home / "daemon.json"

    async def written() -> bool:
        if proc.returncode is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}: {Path(log.name).read_text()[-2000:]}")
        try:
            return bool(json.loads(info.read_text())["pid"] == proc.pid)
        except (OSError, ValueError, KeyError):
            return False

    await until(written, "daemon.json of the new daemon")
    client = DaemonClient(json.loads(info.read_text())["admin_url"], read_admin_token(home) or "")
    try:
        await until(client.healthz, "the daemon to answer")
        yield proc, client
    finally:
        await client.close()
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        log.close()


async def test_daemon_stop_leaves_models_running_for_the_next_daemon_unless_asked(
        tmp_path: Path, fake_runtime: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    runtime_pid: int | None = None
    try:
        async with daemon_process(home, fake_runtime) as (proc, client):
            await client.create_model(model("m", str(model_file)))
            runtime_pid = (await client.start_model("m", wait=True)).pid
            assert runtime_pid is not None
            assert await ctl.run(ctl.parse_args(["daemon", "stop"]), client) == 0
            assert "the daemon has stopped" in capsys.readouterr().out
            assert proc.returncode is not None or await asyncio.wait_for(proc.wait(), 5) == 0
            assert not await client.healthz()
            assert psutil.pid_exists(runtime_pid), "the model should outlive the daemon"

        async with daemon_process(home, fake_runtime) as (proc, client):
            async def adopted() -> bool:
                status = (await client.get_model("m")).status
                return status.state == ModelState.READY and status.pid == runtime_pid

            await until(adopted, "the next daemon to adopt the running model")
            assert await ctl.run(ctl.parse_args(["daemon", "stop", "--stop-models"]), client) == 0
            out = capsys.readouterr().out
            assert "stopped models: m" in out and "the daemon has stopped" in out
            assert not psutil.pid_exists(runtime_pid) or psutil.Process(runtime_pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if runtime_pid is not None and psutil.pid_exists(runtime_pid):
            psutil.Process(runtime_pid).kill()


def test_stopping_when_no_daemon_runs_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "admin-token").write_text("t")
    done = subprocess.run([sys.executable, "-m", "mirbadllm", "ctl", "--home", str(home), "--url",
                           "http://127.0.0.1:9", "daemon", "stop"], check=False, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "not running" in done.stderr


async def test_daemon_stop_does_not_wait_on_the_apps_long_poll_or_a_followed_log(
        tmp_path: Path, fake_runtime: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The app holds a long-poll open all the time, and a followed log on its Logs tab: a stop
    answers the poll at once and cuts the log stream (it took 2 minutes), never waiting on them."""
    import aiohttp

    home = tmp_path / "home"
    async with daemon_process(home, fake_runtime) as (proc, client):
        await client.create_model(model("m", str(model_file)))
        runtime_pid = (await client.start_model("m", wait=True)).pid
        since = (await client.events(0, timeout=0)).last_id
        daemon = psutil.Process(proc.pid)

        def open_connections() -> int:
            return sum(c.status == psutil.CONN_ESTABLISHED for c in daemon.net_connections())

        before = open_connections()
        admin_url = json.loads((home / "daemon.json").read_text())["admin_url"]
        token = read_admin_token(home) or ""
        app = DaemonClient(admin_url, token)
        poll = asyncio.ensure_future(app.events(since, timeout=60))  # the app holds one open all the time
        logs = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"})
        stream = await logs.get(f"{admin_url}/api/models/m/logs?follow=1&tail=1")

        async def both_open() -> bool:
            return open_connections() >= before + 2

        try:
            await until(both_open, "the long-poll and the log stream to reach the daemon")
            assert await ctl.run(ctl.parse_args(["daemon", "stop"]), client) == 0
            assert "the daemon has stopped" in capsys.readouterr().out
            page = await asyncio.wait_for(poll, 20)  # answered by the stop, well before its own 60 s
            assert page.last_id >= since and not poll.cancelled()
            assert await asyncio.wait_for(proc.wait(), 20) == 0  # it took 121 s with a followed log
        finally:
            poll.cancel()
            stream.close()
            await logs.close()
            await app.close()
            if runtime_pid is not None and psutil.pid_exists(runtime_pid):
                psutil.Process(runtime_pid).kill()
