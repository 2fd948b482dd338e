"""An installed update restarts this machine's daemon and its local agent onto the new version.

The seam is what a real install changes: the installed distribution's metadata, which
``program_version`` reads in the daemon and in its agent alike. The daemon runs from an empty folder
with ``PYTHONPATH`` putting ``site/mirbadllm.dist-info`` first, so no product code has a test
switch. The release's "build" is that ``METADATA`` file with the new version: the real
``UpdateChecker`` fetches the signed feed and stages it, the real ``AppImageInstaller`` swaps it in,
and ``DaemonRestarter`` stops the daemon and starts it again through the app's own launcher.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.bootstrap import connect_daemon, wait_gone
from app.daemon_restart import DaemonRestarter, older
from app.updates import AppImageInstaller, UpdateChecker, UpdateReady
from daemon.api.client import DaemonClient
from daemon.api.models import LOCAL_NODE, ModelState
from tests.daemon.harness import model
from tests.updates.release import ReleaseKey, ReleaseServer, feed_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="stops the daemon's process group")]

_LOGGER = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "7.0.0", "7.1.0"


def metadata(version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: mirbadllm\nVersion: {version}\n".encode()


def _kill_daemon(home: Path) -> None:
    """End a daemon this test left running (its own session: the group id is its pid)."""
    try:
        pid = int(json.loads((home / "daemon.json").read_text())["pid"])
        os.killpg(pid, signal.SIGKILL)
        psutil.Process(pid).wait(5)
    except (OSError, ValueError, KeyError, psutil.Error):
        return


@pytest.fixture
async def installed(tmp_path: Path, fake_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    """This machine's MirbadLLM at OLD (its METADATA's path) and a home for its daemon."""
    dist = tmp_path / "site" / "mirbadllm.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_bytes(metadata(OLD))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)  # not the checkout: its own egg-info would name the version
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(dist.parent), str(ROOT)]))
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'port = 0\nllama_server = "{fake_runtime()}"\nseed_demo_model = false\ntelemetry_interval_s = 0.5\n'
        "ollama_port = 0\n")
    yield dist / "METADATA"
    _kill_daemon(home)


async def _local_agent_version(client: DaemonClient, version: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        nodes = {n.id: n for n in await client.list_nodes()}
        seen = nodes[LOCAL_NODE].version if LOCAL_NODE in nodes else ""
        if seen == version or time.monotonic() > deadline:
            return seen
        await client.events(0, timeout=0.25)  # the daemon's long-poll: no sleep of our own


async def test_an_installed_update_restarts_the_daemon_and_its_agent_onto_it_and_keeps_the_models(
        installed: Path, tmp_path: Path, model_file: Path, release_server: ReleaseServer, key: ReleaseKey) -> None:
    home = tmp_path / "home"
    conn = await connect_daemon(home, timeout_s=60)
    client = DaemonClient(conn.url, conn.token)
    try:
        before = (await client.status()).daemon
        assert before.version == OLD
        assert await _local_agent_version(client, OLD) == OLD
        await client.create_model(model("m", str(model_file)))
        pid = (await client.start_model("m", wait=True)).pid
        assert pid is not None

        # The feed offers NEW; the app stages it, installs it, then restarts the daemon onto it.
        release_server.publish(feed_for(NEW, metadata(NEW)), key, metadata(NEW))
        installer = AppImageInstaller(installed)
        checker = UpdateChecker(release_server.feed_url, current_version=OLD, installer=installer,
                                staging_dir=tmp_path / "staging", trusted_keys=(key.public,))
        result = await checker.check()
        assert isinstance(result, UpdateReady) and result.version == NEW
        available = time.monotonic()
        installer.apply(result.staged)
        restarter = DaemonRestarter(home, installed_version=NEW)
        assert older(before.version, restarter.installed_version)
        outcome = await restarter.restart(client)
        serving = time.monotonic() - available
        _LOGGER.warning("update available -> daemon serving %s: %.2f s (restart alone %.2f s)", NEW, serving,
                        outcome.seconds)

        assert outcome.ok and outcome.message == f"Now running {NEW}"
        assert (outcome.version, outcome.agent_version) == (NEW, NEW)
        await client.close()
        client = DaemonClient(outcome.url, conn.token)
        after = (await client.status()).daemon
        assert after.version == NEW and after.started_at > before.started_at
        status = (await client.get_model("m")).status
        assert status.state == ModelState.READY and status.pid == pid  # adopted by the new agent, not restarted

        answer = await client.shutdown(stop_models=True)
        assert await wait_gone(client, answer.get("pid"), 60)
    finally:
        await client.close()


def test_only_an_older_daemon_is_restarted() -> None:
    assert older("0.1.0", "0.2.0") and older("0.2.0rc1", "0.2.0")
    assert not older("0.2.0", "0.2.0") and not older("0.10.0", "0.9.0")
    assert not older("0.0.0+unknown-build", "not a version")
