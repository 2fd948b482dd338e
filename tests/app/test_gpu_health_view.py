"""The Nodes page's GPU health column: ECC, XID and throttle reasons where a GPU reports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent.api.models import GpuEcc, GpuInfo
from app.ui.main_window import MainWindow
from app.viewmodels.nodes import gpu_health
from daemon.api.client import DaemonClient
from daemon.api.nodes import NodeState, NodeView

GIB = 1 << 30
SICK = GpuInfo(index=0, name="NVIDIA H100", uuid="GPU-h100", memory_total=80 * GIB, memory_used=GIB,
               ecc=GpuEcc(volatile_corrected=3, volatile_uncorrected=1, aggregate_corrected=900),
               xid_events=2, last_xid=79, throttle_reasons=["gpu_idle", "hw_thermal_slowdown"])
QUIET = GpuInfo(index=1, name="RTX 4090", uuid="GPU-4090", memory_total=24 * GIB)


def test_health_says_what_the_gpu_reports() -> None:
    assert gpu_health(SICK) == "ECC 3 corrected, 1 uncorrected · XID ×2 (last 79) · throttled: hw thermal slowdown"
    assert gpu_health(QUIET) == "—"  # reports nothing: nothing claimed
    idle = QUIET.model_copy(update={"throttle_reasons": ["gpu_idle"], "xid_events": 0,
                                    "ecc": GpuEcc(aggregate_uncorrected=0)})
    assert gpu_health(idle) == "ECC 0 uncorrected"  # idle clocks and no XID are not news
    apple = GpuInfo(index=0, name="Apple M3 Max", memory_total=64 * GIB, unified_memory=True,
                    working_set_limit=48 * GIB)
    assert gpu_health(apple) == "unified memory, Metal limit 48.0 GiB"


@pytest.fixture
def window(real_daemon: Any, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)


@pytest.mark.gui
def test_the_gpu_table_shows_each_gpus_health(window: MainWindow) -> None:
    window.show_page("nodes")
    table = window.nodes.panel.gpus
    window.nodes.panel.show_node(NodeView(id="local", name="ws", local=True, state=NodeState.ONLINE,
                                          gpus=[SICK, QUIET]))
    header = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert header[-1] == "Health"
    assert table.item(0, header.index("Health")).text().startswith("ECC 3 corrected, 1 uncorrected · XID ×2")
    assert table.item(1, header.index("Health")).text() == "—"
