"""The app against a real daemon: the app starts it, the tray starts a model, the Playground streams.

The daemon runs as its own detached process, started by the app's own launcher (exactly as a user's
first launch does), with the fake llama-server from ``tests/fakes`` as its runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from app.bootstrap import connect_daemon
from app.context import AppContext
from app.ui import theme
from app.ui.main_window import MainWindow
from app.ui.tray import TrayController
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition
from tests.fakes.gguf_files import gguf_bytes

pytestmark = [pytest.mark.gui, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def run(qtbot: Any, coro: Any, timeout_ms: int = 60_000) -> Any:
    task = asyncio.ensure_future(coro)
    qtbot.waitUntil(task.done, timeout=timeout_ms)
    return task.result()


def _stop_daemon(home: Path) -> None:
    """End the daemon this test started (its own session: the group id is its pid)."""
    try:
        pid = int(json.loads((home / "daemon.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        try:
            psutil.Process(pid).wait(wait_s)  # not our child: psutil waits on the pid itself
            return
        except psutil.NoSuchProcess:
            return
        except psutil.TimeoutExpired:
            continue


@pytest.fixture
def daemon_home(tmp_path: Path, fake_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    runtime = fake_runtime(tokens=12, token_delay_s=0.03)
    (home / "config.toml").write_text(
        f'port = 0\nllama_server = "{runtime}"\nseed_demo_model = false\n'
        "telemetry_interval_s = 0.5\nhistory_interval_s = 0.5\n")
    monkeypatch.chdir(ROOT)  # the daemon is started as `python -m mirbadllm daemon`
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield home
    _stop_daemon(home)


@pytest.mark.skipif(os.name != "posix", reason="stops the daemon's process group")
def test_tray_starts_a_model_and_the_playground_streams_it(daemon_home: Path, tmp_path: Path, qloop: Any,
                                                            qapp: QApplication, qtbot: Any) -> None:
    theme.apply(qapp, "light")
    conn = run(qtbot, connect_daemon(daemon_home, timeout_s=60))
    assert conn.started_by_us and (daemon_home / "logs" / "daemon-launch.log").exists()
    client = DaemonClient(conn.url, conn.token)
    model_file = tmp_path / "tiny.gguf"
    model_file.write_bytes(gguf_bytes())  # the agent refuses a malformed header before a start
    run(qtbot, client.create_model(ModelDefinition(id="tiny", served_name="tiny-chat", model_path=str(model_file))))

    ctx = AppContext.create(client, daemon_home, prefs_path=tmp_path / "app.json", platform="linux")
    ctx.start()
    window = MainWindow(ctx, apply_theme=lambda mode: theme.apply(qapp, mode))
    window.resize(1280, 800)
    window.show()
    tray = TrayController(ctx, open_window=window.bring_to_front, quit_app=lambda: None,
                          stop_all_and_quit=lambda: None)
    try:
        qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.model("tiny") is not None, timeout=20_000)
        tray.menu.aboutToShow.emit()
        tray.action("tray-model-tiny").trigger()  # type: ignore[union-attr]
        window.show_page("models")
        badge = window.models.list.itemWidget(window.models.list.item(0))
        qtbot.waitUntil(lambda: window.models.list.itemWidget(window.models.list.item(0)).badge.text() == "Ready",
                        timeout=60_000)
        assert badge is not None

        window.show_page("playground")
        page = window.playground
        qtbot.waitUntil(lambda: page.model.currentText() == "tiny-chat", timeout=10_000)
        seen: list[str] = []
        ctx.playground.state.subscribe(lambda s: s.messages and s.messages[-1].role == "assistant"
                                       and seen.append(s.messages[-1].content))
        page.input.setPlainText("Say hello")
        page.send_button.click()
        qtbot.waitUntil(lambda: not ctx.playground.state.value.busy and len(ctx.playground.state.value.messages) == 2,
                        timeout=60_000)
        answer = ctx.playground.state.value.messages[-1]
        assert answer.error is None, answer.error
        assert answer.content.startswith("Hello from the fake")
        pieces = [text for n, text in enumerate(seen) if text and (n == 0 or text != seen[n - 1])]
        assert len(pieces) >= 5, f"the answer did not arrive in pieces: {pieces}"
        assert answer.stats is not None and answer.stats.ttft_ms is not None
        assert page.bubbles[-1].text.text() == answer.content
        assert "TTFT" in page.bubbles[-1].stats.text()
    finally:
        run(qtbot, ctx.fleet.stop_all())
        window.quitting = True
        window.close()
        window.deleteLater()
        run(qtbot, ctx.close())
        qapp.sendPostedEvents(None, QEvent.Type.DeferredDelete)
