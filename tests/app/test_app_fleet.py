"""The event feed and the fleet view-model against the in-memory fake daemon."""

from __future__ import annotations

from fake_daemon import FakeDaemonClient
from helpers import started, until

from app.viewmodels.fleet import FleetState, FleetViewModel, Notice
from daemon.api.client import DaemonError
from daemon.api.models import ModelState


async def test_first_sync_lists_every_model_and_the_api_url(fake: FakeDaemonClient) -> None:
    fleet = await started(fake)
    snap = fleet.snapshot.value
    assert [m.definition.id for m in snap.models] == ["alpha", "beta"]
    assert snap.connected and snap.state == FleetState.IDLE
    assert snap.api_url == "http://127.0.0.1:8484/v1"
    assert snap.local_host is not None and snap.local_host.gpus[0].name == "NVIDIA RTX 4070"
    await fleet.stop()


async def test_pushed_state_changes_reach_the_snapshot_and_notify(fake: FakeDaemonClient) -> None:
    fleet = await started(fake)
    notices: list[Notice] = []
    fleet.notices.subscribe(notices.append)
    fake.set_state("alpha", ModelState.STARTING)
    await until(lambda: fleet.snapshot.value.state == FleetState.STARTING)
    fake.set_state("alpha", ModelState.READY)
    await until(lambda: fleet.snapshot.value.state == FleetState.READY)
    fake.set_state("beta", ModelState.FAILED, error="llama-server exited 1: out of memory")
    await until(lambda: fleet.snapshot.value.state == FleetState.FAILED)
    assert [(n.model_id, n.failed) for n in notices] == [("alpha", False), ("beta", True)]
    assert "out of memory" in notices[1].message
    assert "1 of 2 models ready" in fleet.snapshot.value.summary
    await fleet.stop()


async def test_reset_and_new_boot_resync_from_status(fake: FakeDaemonClient) -> None:
    fleet = await started(fake)
    assert fleet.feed.resyncs == 1
    fake.set_state("alpha", ModelState.READY)
    await until(lambda: fleet.feed.since == 1)
    # The daemon restarts: new boot id, ids from 1 again, and the model is gone meanwhile.
    del fake.definitions["beta"], fake.statuses["beta"]
    fake.restart_daemon()
    fake.publish("model.state", "alpha", state="ready")
    await until(lambda: fleet.feed.resyncs == 2, what="resync after restart")
    await until(lambda: [m.definition.id for m in fleet.snapshot.value.models] == ["alpha"])
    await fleet.stop()


async def test_unreachable_daemon_shows_and_recovers(fake: FakeDaemonClient) -> None:
    fleet = FleetViewModel(fake, host_refresh_s=3600, poll_timeout=0.05)
    fleet.feed._retry_delays = (0.01,)
    fake.unreachable = True
    fleet.start()
    await until(lambda: fake.called("status"), what="a first try")
    assert fleet.snapshot.value.state == FleetState.UNREACHABLE
    assert "cannot reach" in (fleet.snapshot.value.error or "")
    fake.unreachable = False
    await until(lambda: fleet.snapshot.value.connected and fleet.snapshot.value.loaded)
    assert fleet.snapshot.value.state == FleetState.IDLE
    await fleet.stop()


async def test_actions_call_the_daemon_and_update_at_once(fake: FakeDaemonClient) -> None:
    fleet = await started(fake)
    await fleet.toggle_model("alpha")
    assert fake.called("start_model") == [("alpha",)]
    assert fleet.snapshot.value.model("alpha").status.state == ModelState.STARTING  # type: ignore[union-attr]
    await fleet.toggle_model("alpha")
    assert fake.called("stop_model") == [("alpha",)]
    await fleet.start_model("beta")
    fake.calls.clear()
    await fleet.stop_all()
    assert fake.called("stop_model") == [("beta",)]
    await fleet.stop()


async def test_a_failed_action_raises_for_the_caller(fake: FakeDaemonClient) -> None:
    fleet = await started(fake)
    fake.fail_next["start_model"] = DaemonError(503, "node_offline", "node 'local' is offline")
    try:
        await fleet.start_model("alpha")
    except DaemonError as exc:
        assert exc.code == "node_offline"
    else:
        raise AssertionError("the error was swallowed")
    await fleet.stop()


async def test_removed_and_added_models_follow_events(fake: FakeDaemonClient) -> None:
    from fake_daemon import definition

    fleet = await started(fake)
    await fake.create_model(definition("gamma", tags=["embed"]))
    await until(lambda: fleet.snapshot.value.model("gamma") is not None)
    assert fleet.snapshot.value.tags == ("chat", "code", "embed")
    await fake.delete_model("alpha")
    await until(lambda: fleet.snapshot.value.model("alpha") is None)
    await fleet.stop()
