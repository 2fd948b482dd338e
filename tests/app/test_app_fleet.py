"""The event feed and the fleet view-model against the real daemon: one for the module (no local agent)
with a node, "workstation", whose made-up GPU is an RTX 4070 and whose runtime is the fake
llama-server (it fails to load a model run with ``--threads 3``); the restart and unreachable tests
run daemons of their own on a port they keep."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from helpers import definition, started, until
from real_daemon import (
    RealDaemon,
    alpha_and_beta,
    app_client,
    ask,
    daemon_in_thread,
    daemon_with_workstation,
    fresh,
    on_workstation,
)

from agent.api.models import GpuInfo
from app.viewmodels.fleet import FleetState, FleetViewModel, Notice
from daemon import admin_token
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import ModelState
from daemon.paths import DaemonPaths
from tests.fakes import write_fake_runtime
from tests.fakes.ports import free_port_block

GIB = 1 << 30
RTX_4070 = GpuInfo(index=0, name="NVIDIA RTX 4070", memory_total=12 * GIB, memory_used=5 * GIB)
FAILED_TO_LOAD = "llama-server exited 1: main: exiting due to model loading error"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    with daemon_with_workstation(tmp_path_factory.mktemp("fleet"), [RTX_4070], fail_when="--threads 3") as found:
        yield found


@pytest.fixture
async def client(daemon: RealDaemon) -> AsyncIterator[DaemonClient]:
    """The app's client of the module's daemon, reset to alpha and beta ("Beta-7B"), stopped."""
    async with app_client(daemon, *alpha_and_beta(daemon)) as found:
        yield found


def state(daemon: RealDaemon, model_id: str) -> ModelState:
    return ask(daemon, lambda c: c.get_model(model_id)).status.state


async def test_first_sync_lists_every_model_and_the_api_url(client: DaemonClient, daemon: RealDaemon) -> None:
    fleet = await started(client)
    snap = fleet.snapshot.value
    assert [m.definition.id for m in snap.models] == ["alpha", "beta"]
    assert snap.connected and snap.state == FleetState.IDLE
    assert snap.api_url == f"{daemon[0]}/v1"
    assert snap.local_host is not None and snap.local_host.gpus[0].name == "NVIDIA RTX 4070"
    await fleet.stop()


async def test_pushed_state_changes_reach_the_snapshot_and_notify(client: DaemonClient, daemon: RealDaemon) -> None:
    ask(daemon, lambda c: c.update_model(on_workstation(daemon, "beta", served_name="Beta-7B",
                                                        tags=["code", "chat"], settings={"threads": 3})))
    fleet = await started(client)
    notices: list[Notice] = []
    fleet.notices.subscribe(notices.append)
    seen: list[FleetState] = []
    fleet.snapshot.subscribe(lambda snap: seen.append(snap.state))
    ask(daemon, lambda c: c.start_model("alpha"))  # another client: the app hears of it by events only
    await until(lambda: fleet.snapshot.value.state == FleetState.READY, timeout=30)
    assert seen.index(FleetState.STARTING) < seen.index(FleetState.READY)
    ask(daemon, lambda c: c.start_model("beta"))  # its runtime cannot load it
    await until(lambda: fleet.snapshot.value.state == FleetState.FAILED, timeout=30)
    assert [(n.model_id, n.failed) for n in notices] == [("alpha", False), ("beta", True)]
    assert FAILED_TO_LOAD in notices[1].message
    assert "1 of 2 models ready" in fleet.snapshot.value.summary
    await fleet.stop()


async def test_reset_and_new_boot_resync_from_status(tmp_path: Path) -> None:
    home, port, runtime = tmp_path / "home", free_port_block(1), write_fake_runtime(tmp_path / "runtime")
    daemons = ExitStack()  # with its local agent: its models' node ("local") is there each time
    try:
        first = daemons.enter_context(daemon_in_thread(home, runtime, port=port))
        for model_id in ("alpha", "beta"):
            first.call(lambda deps, m=model_id: deps.registry.add(definition(m)))
        client = DaemonClient(*first, client_name="app")
        fleet = await started(client)
        fleet.feed._retry_delays = (0.05,)
        assert fleet.feed.resyncs == 1
        await client.create_key("editor")  # an event
        await until(lambda: fleet.feed.since >= 1)
        # The daemon restarts: new boot id, ids from 1 again, and the model is gone meanwhile.
        first.call(lambda deps: deps.registry.remove("beta"))  # no event: only a resync can tell
        daemons.close()
        daemons.enter_context(daemon_in_thread(home, runtime, port=port))
        await until(lambda: fleet.feed.resyncs == 2, timeout=10, what="resync after restart")
        await until(lambda: [m.definition.id for m in fleet.snapshot.value.models] == ["alpha"])
        await fleet.stop()
        await client.close()
    finally:
        daemons.close()


async def test_unreachable_daemon_shows_and_recovers(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port_block(1)
    token = admin_token.load_or_create(DaemonPaths(home).admin_token)  # the daemon's, before it first runs
    client = DaemonClient(f"http://127.0.0.1:{port}", token, client_name="app")
    fleet = FleetViewModel(client, host_refresh_s=3600, poll_timeout=0.05)
    fleet.feed._retry_delays = (0.01,)
    fleet.start()
    await until(lambda: fleet.snapshot.value.error, what="a first try")
    assert fleet.snapshot.value.state == FleetState.UNREACHABLE
    assert "cannot reach" in (fleet.snapshot.value.error or "")
    with daemon_in_thread(home, port=port):  # the daemon starts
        await until(lambda: fleet.snapshot.value.connected and fleet.snapshot.value.loaded, timeout=10)
        assert fleet.snapshot.value.state == FleetState.IDLE
        await fleet.stop()
    await client.close()


async def test_actions_call_the_daemon_and_update_at_once(client: DaemonClient, daemon: RealDaemon) -> None:
    fleet = await started(client)
    await fleet.toggle_model("alpha")
    assert fleet.snapshot.value.model("alpha").status.state == ModelState.STARTING  # type: ignore[union-attr]
    assert state(daemon, "alpha") in (ModelState.STARTING, ModelState.READY)
    await fleet.toggle_model("alpha")
    assert state(daemon, "alpha") == ModelState.STOPPED
    await fleet.start_model("beta")
    assert state(daemon, "beta") in (ModelState.STARTING, ModelState.READY)
    await fleet.stop_all()
    assert state(daemon, "beta") == ModelState.STOPPED and state(daemon, "alpha") == ModelState.STOPPED
    await until(lambda: fleet.snapshot.value.state == FleetState.IDLE, timeout=10)
    await fleet.stop()


async def test_a_failed_action_raises_for_the_caller(client: DaemonClient, daemon: RealDaemon) -> None:
    fresh(daemon, definition("alpha"))  # placed on a node this daemon does not know
    fleet = await started(client)
    with pytest.raises(DaemonError) as refused:
        await fleet.start_model("alpha")
    assert refused.value.code == "node_unknown" and "unknown node" in str(refused.value)
    await fleet.stop()


async def test_removed_and_added_models_follow_events(client: DaemonClient, daemon: RealDaemon) -> None:
    fleet = await started(client)
    ask(daemon, lambda c: c.create_model(on_workstation(daemon, "gamma", tags=["embed"])))
    await until(lambda: fleet.snapshot.value.model("gamma") is not None)
    assert fleet.snapshot.value.tags == ("chat", "code", "embed")
    ask(daemon, lambda c: c.delete_model("alpha"))
    await until(lambda: fleet.snapshot.value.model("alpha") is None)
    await fleet.stop()
