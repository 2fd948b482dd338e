"""Fleet alerts: a node offline, a GPU's XID or uncorrected ECC errors, a models disk nearly full.
Each is on the Overview's attention list with what to do, and told once in the tray as it appears.
The widget and tray tests run the real daemon with two real in-process agents: "this-pc", whose
made-up GPU reports an XID, and "mac-mini", whose agent has stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel, QWidget
from real_daemon import RealDaemon, daemon_in_thread

from app.ui.main_window import MainWindow
from app.viewmodels.fleet import FleetSnapshot, Notice, _transitions, host_alerts
from daemon.api.client import DaemonClient
from daemon.api.contracts import GpuInfo
from daemon.api.models import HostSnapshot

GIB = 1024 ** 3


def gpu(**kw: Any) -> GpuInfo:
    return GpuInfo.model_validate({"index": 0, "name": "RTX 4090", "memory_total": 24 * GIB, "memory_used": GIB,
                                   **kw})


def host(**kw: Any) -> HostSnapshot:
    return HostSnapshot.model_validate({"node": "n1", "node_name": "gamer", "disk_total": 1000 * GIB,
                                        "disk_free": 500 * GIB, **kw})


def test_each_fault_is_named_with_what_to_do() -> None:
    assert host_alerts((host(),)) == []
    offline = host_alerts((host(online=False, disk_free=1),))
    assert [a.title for a in offline] == ["gamer is offline"]  # its stale figures say nothing more
    assert "mirbadllm agent" in offline[0].what_to_do
    xid = host_alerts((host(gpus=[gpu(xid_events=2, last_xid=79)]),))
    assert xid[0].title == "GPU 0 on gamer reported XID 79: the GPU has fallen off the bus"
    assert "Restart the models" in xid[0].what_to_do
    ecc = host_alerts((host(gpus=[gpu(ecc={"volatile_uncorrected": 3, "volatile_corrected": 40})]),))
    assert [a.title for a in ecc] == ["GPU 0 on gamer has 3 uncorrected ECC errors"]
    assert host_alerts((host(gpus=[gpu(ecc={"volatile_corrected": 40, "volatile_uncorrected": 0})]),)) == []
    disk = host_alerts((host(disk_free=50 * GIB),))
    assert [a.title for a in disk] == ["gamer's models disk is 95% full"] and "50.0 GiB free" in disk[0].what_to_do
    assert host_alerts((host(disk_free=150 * GIB),)) == []  # 15 % free: fine


def test_a_new_fault_is_told_once_and_not_at_the_first_figures() -> None:
    calm = FleetSnapshot(loaded=True, hosts=(host(),))
    full = FleetSnapshot(loaded=True, hosts=(host(disk_free=GIB),))
    told = _transitions(calm, full)
    assert [(n.title, n.failed) for n in told] == [("gamer's models disk is 100% full", True)]
    assert _transitions(full, full) == []  # still full: not told again
    assert _transitions(FleetSnapshot(loaded=True), full) == []  # the first figures: what was already so


@pytest.fixture(scope="module")
def real_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """The module's daemon, probing its nodes every 0.5 s: a node that goes away is offline in 1.5 s."""
    with daemon_in_thread(tmp_path_factory.mktemp("daemon"), probe_interval_s=0.5) as found:
        yield found


@pytest.fixture(scope="module")
def faulty(real_daemon: RealDaemon) -> Iterator[RealDaemon]:
    """The module's daemon with "this-pc" (its GPU reported XID 43) online and "mac-mini" offline."""
    from tests.fleet.agents import eventually

    this_pc = real_daemon.add_node("this-pc", [gpu(xid_events=1, last_xid=43)])
    mac_mini = real_daemon.add_node("mac-mini")

    async def stop_mac_mini(deps: Any) -> None:  # its machine goes away: missed probes, then offline
        await real_daemon.agents[-1].close()
        await eventually(lambda: any(h.node == mac_mini and not h.online for h in deps.telemetry.hosts()),
                         timeout=30, what="mac-mini offline")
        await eventually(lambda: any(h.node == this_pc and h.gpus for h in deps.telemetry.hosts()),
                         what="this-pc's GPU figures")

    real_daemon.call(stop_mac_mini)
    yield real_daemon


@pytest.mark.gui
def test_the_overview_lists_the_nodes_faults_at_1024x700(faulty: RealDaemon, open_main_window: Callable[..., MainWindow],
                                                         qtbot: Any) -> None:
    win = open_main_window(DaemonClient(*faulty, client_name="app"), size=(1024, 700))
    qtbot.waitUntil(lambda: len([w for w in win.overview.findChildren(QWidget)
                                 if w.objectName().startswith("attention-host-")]) == 2)
    rows = [w for w in win.overview.findChildren(QWidget) if w.objectName().startswith("attention-host-")]
    texts = [" ".join(label.text() for label in row.findChildren(QLabel)) for row in rows]
    assert any("XID 43" in t and "stopped processing" in t for t in texts)
    assert any("mac-mini is offline" in t for t in texts)


async def test_the_tray_hears_of_a_fault_that_appears(faulty: RealDaemon) -> None:
    from helpers import started

    from tests.fleet.agents import eventually

    client = DaemonClient(*faulty, client_name="app")
    fleet = await started(client)
    notices: list[Notice] = []
    fleet.notices.subscribe(notices.append)
    probe = faulty.agents[0].deps[-1].gpu_probe  # this-pc's: its GPU now reports uncorrected ECC errors
    probe.gpus = [gpu(xid_events=1, last_xid=43, ecc={"volatile_uncorrected": 3, "volatile_corrected": 0})]

    async def told() -> list[Notice]:  # the host figures as the daemon has them now
        await fleet.resync()
        return notices

    await eventually(told, timeout=10, what="the tray told of the new fault")
    assert [(n.title, n.failed) for n in notices] == [("GPU 0 on this-pc has 3 uncorrected ECC errors", True)]
    probe.gpus = [gpu(xid_events=1, last_xid=43)]
    await fleet.stop()
    await client.close()
