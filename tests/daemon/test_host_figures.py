"""The hosts in /api/status carry what the fleet's alerts need: the node's name and its models
disk, measured by the real local agent."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from tests.daemon.harness import running_daemon
from tests.fakes import write_fake_runtime
from tests.fleet.agents import eventually


async def test_the_local_host_says_its_name_and_its_models_disk(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", write_fake_runtime(tmp_path / "bin")) as d:
        async def measured():  # type: ignore[no-untyped-def]
            hosts = (await d.client.status()).hosts
            return hosts[0] if hosts and hosts[0].disk_total else None

        local = await eventually(measured, timeout=30, what="the agent's first sample with its disk")
        disk = shutil.disk_usage(tmp_path)  # the agent's models folder is under the daemon's home here
        assert local.node == "local" and local.node_name == socket.gethostname()
        assert local.disk_total == disk.total and 0 < (local.disk_free or 0) <= disk.total
