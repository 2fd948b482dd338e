"""The app's Settings view-model for tracing against a real daemon: a change is saved there (and
nothing else with it), and what the daemon refuses comes back as its own message, changing nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observability import ObservabilityViewModel
from daemon.api.models import DaemonSettings, TracingSettings
from tests.daemon.harness import RunningDaemon, running_daemon


@pytest.fixture
async def d(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as running:
        yield running


async def test_the_settings_view_model_saves_tracing_and_shows_the_daemons_refusal(d: RunningDaemon) -> None:
    await d.client.put_settings(DaemonSettings(require_api_keys=True))
    vm = ObservabilityViewModel(FleetViewModel(d.client))
    await vm.load()
    assert vm.state.value.tracing == TracingSettings()

    saved = await vm.save(True, " http://collector:4318/v1/traces ", "gw", "0.5")
    wanted = TracingSettings(enabled=True, endpoint="http://collector:4318/v1/traces", service_name="gw",
                             sample_ratio=0.5)
    assert saved == wanted and vm.state.value.saved and vm.state.value.error is None
    after = await d.client.get_settings()
    assert after.tracing == wanted and after.require_api_keys  # the rest as it was

    assert await vm.save(True, "collector:4318", "gw", "0.5") is None
    assert (vm.state.value.error or "").startswith("tracing.endpoint: ")
    assert await vm.save(True, "http://collector:4318/v1/traces", "gw", "2") is None
    assert (vm.state.value.error or "").startswith("tracing.sample_ratio: ")
    assert (await d.client.get_settings()).tracing == wanted and vm.state.value.tracing == wanted
