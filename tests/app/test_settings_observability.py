"""The Settings page edits the daemon's tracing (saved there, applied at its next start; a value the
daemon refuses is shown with its message) and shows where Prometheus scrapes the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtGui import QGuiApplication

from app.ui.main_window import MainWindow
from app.viewmodels.observability import RATIO_NOT_A_NUMBER, RESTART_NOTE
from daemon.api.client import DaemonClient
from daemon.api.models import DaemonSettings, TracingSettings

pytestmark = pytest.mark.gui


@pytest.fixture
def window(fake: FakeDaemonClient, open_main_window: Callable[..., MainWindow], qtbot: Any) -> MainWindow:
    win = open_main_window(fake)
    win.show_page("settings")
    qtbot.waitUntil(lambda: win.settings.tracing.vm.state.value.loaded)
    return win


def _fill(win: MainWindow, *, endpoint: str, ratio: str, service: str = "gateway-a") -> None:
    card = win.settings.tracing
    card.enabled.setChecked(True)
    card.endpoint.setText(endpoint)
    card.service.setText(service)
    card.ratio.setText(ratio)
    card.save.click()


def test_tracing_is_saved_to_the_daemon_and_said_to_apply_at_its_next_start(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    card = window.settings.tracing
    assert not card.enabled.isChecked() and card.endpoint.text() == "http://127.0.0.1:4318/v1/traces"
    fake.settings = fake.settings.model_copy(update={"require_api_keys": True})  # set elsewhere: must stay
    _fill(window, endpoint="http://collector:4318/v1/traces", ratio="0.1")
    qtbot.waitUntil(lambda: card.note.text().startswith("Saved."))
    assert card.note.text() == f"Saved. {RESTART_NOTE}" and "next start" in RESTART_NOTE
    assert fake.settings.tracing == TracingSettings(enabled=True, endpoint="http://collector:4318/v1/traces",
                                                    service_name="gateway-a", sample_ratio=0.1)
    assert fake.settings.require_api_keys  # only tracing changed
    assert not card.error.isVisible()


@pytest.mark.parametrize(("endpoint", "ratio", "field"), [("collector:4318", "0.5", "tracing.endpoint"),
                                                           ("http://collector:4318/v1/traces", "1.5",
                                                            "tracing.sample_ratio")])
def test_a_value_the_daemon_refuses_is_shown_with_its_message_and_nothing_changes(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any, endpoint: str, ratio: str, field: str) -> None:
    card = window.settings.tracing
    _fill(window, endpoint=endpoint, ratio=ratio)
    qtbot.waitUntil(lambda: card.error.isVisible())
    assert card.error.text().startswith(f"{field}: ")  # the daemon's 422 message, naming the field
    assert fake.settings == DaemonSettings() and not card.note.text().startswith("Saved.")
    assert (card.endpoint.text(), card.ratio.text()) == (endpoint, ratio)  # the edit stays to be fixed


def test_a_ratio_that_is_no_number_is_not_sent(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    _fill(window, endpoint="http://collector:4318/v1/traces", ratio="half")
    qtbot.waitUntil(lambda: window.settings.tracing.error.isVisible())
    assert window.settings.tracing.error.text() == RATIO_NOT_A_NUMBER and not fake.called("put_settings")


def test_the_prometheus_job_names_metrics_and_service_discovery_with_the_token_file(window: MainWindow) -> None:
    card = window.settings.prometheus
    assert card.metrics_url.edit.text() == "http://127.0.0.1:8484/metrics"
    text = card.snippet.toPlainText()
    assert "metrics_path: /metrics" in text
    assert "- url: http://127.0.0.1:8484/api/prometheus/targets" in text
    assert "type: Bearer" in text and "credentials_file: /tmp/mirbadllm/admin-token" in text
    card.copy.click()
    assert QGuiApplication.clipboard().text() == text


def test_tracing_the_real_daemon_keeps_shows_on_the_card(real_daemon: tuple[str, str],
                                                          open_main_window: Callable[..., MainWindow],
                                                          qtbot: Any) -> None:
    client = DaemonClient(*real_daemon, client_name="app")
    task = asyncio.ensure_future(client.put_settings(DaemonSettings(tracing=TracingSettings(
        enabled=True, sample_ratio=0.25, endpoint="http://otel-collector.lan:4318/v1/traces"))))
    qtbot.waitUntil(task.done, timeout=10_000)
    assert task.result().tracing.enabled
    win = open_main_window(client)
    card = win.settings.tracing
    qtbot.waitUntil(lambda: card.vm.state.value.loaded)
    assert card.enabled.isChecked() and card.ratio.text() == "0.25" and "4318" in card.endpoint.text()
