"""The Settings page edits the daemon's tracing (saved there, applied at its next start; a value the
daemon refuses is shown with its message) and shows where Prometheus scrapes the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from PySide6.QtGui import QGuiApplication

from app.ui.main_window import MainWindow
from app.viewmodels.observability import RATIO_NOT_A_NUMBER, RESTART_NOTE
from daemon.api.client import DaemonClient
from daemon.api.models import DaemonSettings, TracingSettings
from daemon.audit.log import AuditQuery

pytestmark = pytest.mark.gui


def _settings(real_daemon: Any) -> DaemonSettings:
    return real_daemon.call(lambda deps: deps.config.settings())


def _edits(real_daemon: Any) -> int:
    """How many times the daemon's settings were written (its audit log)."""
    return len(real_daemon.call(lambda deps: deps.audit.query(AuditQuery(action="settings.update"))).entries)


@pytest.fixture
def window(real_daemon: Any, open_main_window: Callable[..., MainWindow], qtbot: Any) -> MainWindow:
    client = DaemonClient(*real_daemon, client_name="app")
    reset = asyncio.ensure_future(client.put_settings(  # all of it, as an earlier test changed it
        DaemonSettings.model_validate(DaemonSettings().model_dump())))
    qtbot.waitUntil(reset.done, timeout=10_000)
    win = open_main_window(client)
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
        window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    card = window.settings.tracing
    assert not card.enabled.isChecked() and card.endpoint.text() == "http://127.0.0.1:4318/v1/traces"
    elsewhere = asyncio.ensure_future(window.ctx.client.put_settings(  # set elsewhere: must stay
        _settings(real_daemon).model_copy(update={"require_api_keys": True})))
    qtbot.waitUntil(elsewhere.done, timeout=10_000)
    _fill(window, endpoint="http://collector:4318/v1/traces", ratio="0.1")
    qtbot.waitUntil(lambda: card.note.text().startswith("Saved."))
    assert card.note.text() == f"Saved. {RESTART_NOTE}" and "next start" in RESTART_NOTE
    assert _settings(real_daemon).tracing == TracingSettings(
        enabled=True, endpoint="http://collector:4318/v1/traces", service_name="gateway-a", sample_ratio=0.1)
    assert _settings(real_daemon).require_api_keys  # only tracing changed
    assert not card.error.isVisible()


@pytest.mark.parametrize(("endpoint", "ratio", "field"), [("collector:4318", "0.5", "tracing.endpoint"),
                                                           ("http://collector:4318/v1/traces", "1.5",
                                                            "tracing.sample_ratio")])
def test_a_value_the_daemon_refuses_is_shown_with_its_message_and_nothing_changes(
        window: MainWindow, real_daemon: Any, qtbot: Any, endpoint: str, ratio: str, field: str) -> None:
    card = window.settings.tracing
    _fill(window, endpoint=endpoint, ratio=ratio)
    qtbot.waitUntil(lambda: card.error.isVisible())
    assert card.error.text().startswith(f"{field}: ")  # the daemon's 422 message, naming the field
    assert _settings(real_daemon) == DaemonSettings() and not card.note.text().startswith("Saved.")
    assert (card.endpoint.text(), card.ratio.text()) == (endpoint, ratio)  # the edit stays to be fixed


def test_a_ratio_that_is_no_number_is_not_sent(window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    before = _edits(real_daemon)
    _fill(window, endpoint="http://collector:4318/v1/traces", ratio="half")
    qtbot.waitUntil(lambda: window.settings.tracing.error.isVisible())
    assert window.settings.tracing.error.text() == RATIO_NOT_A_NUMBER
    assert _edits(real_daemon) == before  # nothing sent


def test_the_prometheus_job_names_metrics_and_service_discovery_with_the_token_file(
        window: MainWindow, real_daemon: Any) -> None:
    url, home = real_daemon[0], real_daemon.deps.paths.home
    card = window.settings.prometheus
    assert card.metrics_url.edit.text() == f"{url}/metrics"
    text = card.snippet.toPlainText()
    assert "metrics_path: /metrics" in text
    assert f"- url: {url}/api/prometheus/targets" in text
    assert "type: Bearer" in text and f"credentials_file: {home / 'admin-token'}" in text
    card.copy.click()
    assert QGuiApplication.clipboard().text() == text


def test_tracing_the_real_daemon_keeps_shows_on_the_card(real_daemon: Any,
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
