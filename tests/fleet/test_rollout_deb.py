"""A mixed fleet rolled out end to end: the agent the .deb installed is sent the release's package and
installs it through its one privileged step, the file agent is sent the agent build (real daemon, two
real agent processes, a real runtime).

``--installed-by deb`` is the flag the package's unit passes. The privileged step is
``systemctl start mirbadllm-agent-upgrade.service``; here a ``systemctl`` first on the agent's PATH
plays that unit: it records the call and "installs" the package (its text is the new version) over
the agent's version file. The package lands where ``MIRBADLLM_AGENT_DEB_UPGRADE_FILE`` says (the
real one is /var/lib/mirbadllm-agent/upgrades/mirbadllm-agent-upgrade.deb). The real helper and
unit are tested in tests/shipping/test_deb_agent_upgrade.py.
"""

from __future__ import annotations

import asyncio
import base64
import os
import platform
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.api.upgrade import agent_platform
from core.releases.feed import feed_bytes, make_feed
from core.releases.signing import public_key_b64
from daemon.api.models import ModelState
from daemon.api.upgrades import NodeUpgradeState, RolloutState
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.service_loop import ServiceLoop
from tests.fleet.test_fleet_loopback import FAST_MONITOR, pair
from tests.fleet.test_rollout import FAST_UPGRADES, rollout_end, start_models

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                                 reason="the Debian package is built for Linux x86_64")]

OLD, NEW = "0.1.0", "0.2.0"
BUILD, DEB = agent_platform(platform.system(), platform.machine()) or "", "linux-x86_64-deb"


def stage_release(rd: RunningDaemon) -> None:
    folder = rd.daemon.upgrades.default_folder
    folder.mkdir(parents=True)
    (folder / f"mirbadllm-agent-{NEW}").write_text(f"{NEW}\n")
    (folder / f"mirbadllm_{NEW}_amd64.deb").write_text(f"{NEW}\n(the package)\n")
    data = feed_bytes(make_feed(NEW, {BUILD: folder / f"mirbadllm-agent-{NEW}",
                                      DEB: folder / f"mirbadllm_{NEW}_amd64.deb"}))
    key = Ed25519PrivateKey.generate()
    (folder / "feed.json").write_bytes(data)
    (folder / "feed.json.sig").write_bytes(base64.b64encode(key.sign(data)) + b"\n")
    rd.daemon.upgrades.trusted_keys = (public_key_b64(key),)


def fake_systemctl(home: Path, version_file: Path) -> tuple[Path, Path]:
    """(its folder, its log): installs the package's first line as the version, like the unit would."""
    bin_, log = home / "bin", home / "systemctl.log"
    bin_.mkdir()
    package = home / "upgrades" / "mirbadllm-agent-upgrade.deb"
    script = bin_ / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\n'
                      f'[ "$*" = "start mirbadllm-agent-upgrade.service" ] || exit 1\n'
                      f'head -n 1 {package} > {version_file}.new && mv {version_file}.new {version_file}\n')
    script.chmod(0o755)
    return bin_, log


async def service(agents: Any, tmp_path: Path, name: str, log: list[tuple[str, str]], deb: bool) -> ServiceLoop:
    home = tmp_path / f"agent-{name}"
    home.mkdir(parents=True)
    version_file = home / "version.txt"
    version_file.write_text(f"{OLD}\n")
    env = {"MIRBADLLM_AGENT_VERSION_FILE": str(version_file), "MIRBADLLM_NO_MDNS": "1"}
    if deb:
        bin_, _ = fake_systemctl(home, version_file)
        env |= {"PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}",
                "MIRBADLLM_AGENT_DEB_UPGRADE_FILE": str(home / "upgrades" / "mirbadllm-agent-upgrade.deb")}
    extra = ["--installed-by", "deb"] if deb else ["--upgrade-target", str(version_file)]
    port: list[int] = []

    async def start() -> Any:
        agent = await agents(name, home=home, port=port[0] if port else 0, extra=extra, env=env)
        port[:] = [agent.port]
        return agent

    loop = ServiceLoop(name, start, log)
    await loop.begin()
    return loop


@pytest.fixture
async def loops() -> AsyncIterator[list[ServiceLoop]]:
    made: list[ServiceLoop] = []
    yield made
    for loop in made:
        await loop.close()


async def test_the_deb_node_gets_the_package_and_the_file_node_the_build(
        agents: Any, loops: list[ServiceLoop], tmp_path: Path, model_file: Path) -> None:
    log: list[tuple[str, str]] = []
    packaged, single = await asyncio.gather(service(agents, tmp_path, "packaged", log, deb=True),
                                            service(agents, tmp_path, "single", log, deb=False))
    loops += [packaged, single]
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR,
                              upgrades=FAST_UPGRADES) as rd:
        ids = {"packaged": await pair(rd, packaged.agent), "single": await pair(rd, single.agent)}
        pids = await start_models(rd, model_file, {"packaged": ids["packaged"]})
        stage_release(rd)

        await rd.client.start_upgrade()
        view, _ = await rollout_end(rd)

        assert view.state == RolloutState.DONE, view.reason
        assert [(n.name, n.platform, n.state) for n in view.nodes] == [
            ("packaged", DEB, NodeUpgradeState.DONE), ("single", BUILD, NodeUpgradeState.DONE)]
        assert log == [("packaged", "exit 75"), ("packaged", "back"), ("single", "exit 75"), ("single", "back")]
        # The .deb agent ran its one privileged step once and left no package behind.
        home = tmp_path / "agent-packaged"
        assert (home / "systemctl.log").read_text() == "start mirbadllm-agent-upgrade.service\n"
        assert [p.name for p in (home / "upgrades").iterdir()] == []
        for name in ids:
            assert (tmp_path / f"agent-{name}" / "version.txt").read_text() == f"{NEW}\n"
        status = await eventually(lambda: _ready(rd, "on-packaged"), what="on-packaged ready again")
        assert status.pid == pids["packaged"]  # the runtime outlived the agent's restart


async def _ready(rd: RunningDaemon, model_id: str) -> Any:
    status = (await rd.client.get_model(model_id)).status
    return status if status.state == ModelState.READY else None
