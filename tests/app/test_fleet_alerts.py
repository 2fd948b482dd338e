"""Fleet alerts: a node offline, a GPU's XID or uncorrected ECC errors, a models disk nearly full.
Each is on the Overview's attention list with what to do, and told once in the tray as it appears."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtWidgets import QLabel, QWidget

from app.ui.main_window import MainWindow
from app.viewmodels.fleet import FleetSnapshot, Notice, _transitions, host_alerts
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


@pytest.mark.gui
def test_the_overview_lists_the_nodes_faults_at_1024x700(open_main_window: Callable[..., MainWindow],
                                                              qtbot: Any) -> None:
    fake = FakeDaemonClient([])
    fake.hosts = [host(node="local", node_name="this-pc", gpus=[gpu(xid_events=1, last_xid=43)]),
                  host(node="n2", node_name="mac-mini", online=False)]
    win = open_main_window(fake, size=(1024, 700))
    qtbot.waitUntil(lambda: len([w for w in win.overview.findChildren(QWidget)
                                 if w.objectName().startswith("attention-host-")]) == 2)
    rows = [w for w in win.overview.findChildren(QWidget) if w.objectName().startswith("attention-host-")]
    texts = [" ".join(label.text() for label in row.findChildren(QLabel)) for row in rows]
    assert any("XID 43" in t and "stopped processing" in t for t in texts)
    assert any("mac-mini is offline" in t for t in texts)


async def test_the_tray_hears_of_a_fault_that_appears(fake: FakeDaemonClient) -> None:
    from helpers import started, until

    fleet = await started(fake)
    notices: list[Notice] = []
    fleet.notices.subscribe(notices.append)
    fake.hosts = [h.model_copy(update={"disk_total": 100 * GIB, "disk_free": GIB}) for h in fake.hosts]
    await fleet.resync()
    await until(lambda: bool(notices))
    assert notices[0].failed and "full" in notices[0].title
    await fleet.stop()
