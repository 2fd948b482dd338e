"""``mirbadllm ctl upgrade``: every agent's version, and the agent release rolled out from a terminal.

Two agent processes on loopback, each a ``ServiceLoop`` (systemd's part) reporting the version in
its version file, as in ``test_rollout``. A release whose signature does not verify and one older
than what runs are refused before any node is told; a good one goes out one node at a time, from a
staged folder or fetched by the daemon from the signed feed (``ReleaseServer`` on loopback).
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.releases.feed import feed_bytes, make_feed
from core.releases.signing import public_key_b64
from daemon.api.client import DaemonError
from daemon.api.upgrades import RolloutState
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.service_loop import ServiceLoop
from tests.fleet.test_fleet_loopback import FAST_MONITOR, pair
from tests.fleet.test_rollout import FAST_UPGRADES, NEW, OLD, PLATFORM, loops, service
from tests.updates.release import ReleaseServer

pytestmark = pytest.mark.slow

__all__ = ["loops"]  # the fixture, shared with test_rollout


def stage(folder: Path, version: str, key: Ed25519PrivateKey) -> str:
    """A feed for ``version`` with this machine's agent build, signed by ``key``, in ``folder``."""
    folder.mkdir(parents=True)
    build = folder / f"mirbadllm-agent-{version}"
    build.write_text(f"{version}\n")
    assert PLATFORM is not None
    data = feed_bytes(make_feed(version, {PLATFORM: build}))
    (folder / "feed.json").write_bytes(data)
    (folder / "feed.json.sig").write_bytes(base64.b64encode(key.sign(data)) + b"\n")
    return str(folder)


async def ctl_run(rd: RunningDaemon, *argv: str) -> int:
    args = ctl.parse_args(["upgrade", *argv])
    return await ctl.run(args, rd.client)


async def versions(rd: RunningDaemon, version: str) -> bool:
    return [n.version for n in await rd.client.list_nodes()] == [version, version]


async def refused(rd: RunningDaemon, folder: str) -> str:
    with pytest.raises(DaemonError) as caught:
        await ctl_run(rd, "nodes", "--folder", folder)
    assert caught.value.status == 422 and caught.value.code == "release_refused"
    return caught.value.message


async def test_ctl_refuses_a_bad_release_then_rolls_a_good_one_out_node_by_node(
        agents: Any, loops: list[ServiceLoop], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log: list[tuple[str, str]] = []
    alpha, beta = await asyncio.gather(service(agents, tmp_path, "alpha", log), service(agents, tmp_path, "beta", log))
    loops += [alpha, beta]
    trusted, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR,
                              upgrades=FAST_UPGRADES) as rd:
        rd.daemon.upgrades.trusted_keys = (public_key_b64(trusted),)
        await pair(rd, alpha.agent)
        await pair(rd, beta.agent)
        await eventually(lambda: versions(rd, OLD), what=f"both nodes reporting {OLD}")

        assert await ctl_run(rd) == 0
        out = capsys.readouterr().out
        rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
        assert rows == [["alpha", OLD], ["beta", OLD]]
        assert "no agent rollout since the daemon started" in out

        why = await refused(rd, stage(tmp_path / "forged", NEW, stranger))
        assert why.startswith("Signature check failed")
        why = await refused(rd, stage(tmp_path / "old", "0.0.9", trusted))
        assert why.startswith("Version check failed: the release 0.0.9 is older than") and "no node was told" in why
        rd.daemon.upgrades.daemon_version = "0.0.1"  # only the nodes run something newer now
        why = await refused(rd, stage(tmp_path / "older", "0.0.9", trusted))
        assert f"older than node alpha, which runs {OLD}" in why
        rd.daemon.upgrades.daemon_version = OLD
        assert (await rd.client.upgrade_status()).state == RolloutState.IDLE
        assert log == [] and len(alpha.runs) == len(beta.runs) == 1  # no agent was told anything

        code = await ctl_run(rd, "nodes", "--folder", stage(tmp_path / "good", NEW, trusted))
        out = capsys.readouterr().out
        assert code == 0, out
        steps = [line.split() for line in out.splitlines() if line.startswith("  ")]
        assert steps[:4] == [["alpha", "upgrading"], ["alpha", "done"], ["beta", "upgrading"], ["beta", "done"]]
        assert f"agent {NEW}: done on 2 node(s)" in out and out.count(f"(was {OLD})") == 2
        assert log == [("alpha", "exit 75"), ("alpha", "back"), ("beta", "exit 75"), ("beta", "back")]

        await eventually(lambda: versions(rd, NEW), what=f"both nodes reporting {NEW}")
        assert await ctl_run(rd) == 0
        out = capsys.readouterr().out
        assert [line.split() for line in out.splitlines() if line.startswith("  ")][:2] == [
            ["alpha", NEW], ["beta", NEW]]
        assert f"agent {NEW}: done on 2 node(s)" in out


def publish(server: ReleaseServer, version: str, key: Ed25519PrivateKey, build_dir: Path) -> None:
    """The signed feed of ``version`` with this machine's agent build, served beside it."""
    build_dir.mkdir(parents=True)
    build = build_dir / f"mirbadllm-agent-{version}"
    build.write_text(f"{version}\n")
    assert PLATFORM is not None
    data = feed_bytes(make_feed(version, {PLATFORM: build}))
    server.files.update({"feed.json": data, "feed.json.sig": base64.b64encode(key.sign(data)) + b"\n",
                         build.name: build.read_bytes()})


@pytest.fixture
async def release_server() -> Any:
    server = ReleaseServer()
    await server.start()
    yield server
    await server.close()


async def test_ctl_rolls_out_the_daemons_own_version_fetched_from_the_signed_feed(
        agents: Any, loops: list[ServiceLoop], tmp_path: Path, release_server: ReleaseServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    log: list[tuple[str, str]] = []
    alpha, beta = await asyncio.gather(service(agents, tmp_path, "alpha", log), service(agents, tmp_path, "beta", log))
    loops += [alpha, beta]
    trusted, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR,
                              upgrades=FAST_UPGRADES) as rd:
        rd.daemon.upgrades.trusted_keys = (public_key_b64(trusted),)
        await pair(rd, alpha.agent)
        await pair(rd, beta.agent)
        feed = release_server.feed_url

        publish(release_server, NEW, stranger, tmp_path / "forged")
        with pytest.raises(DaemonError) as caught:
            await ctl_run(rd, "nodes", "--feed", feed)
        assert caught.value.code == "release_refused" and caught.value.message.startswith("Signature check failed")
        assert release_server.hits[f"mirbadllm-agent-{NEW}"] == 0  # nothing downloaded from a forged feed

        publish(release_server, NEW, trusted, tmp_path / "good")
        rd.daemon.upgrades.daemon_version = OLD  # this machine has not taken the update yet
        with pytest.raises(DaemonError) as caught:
            await ctl_run(rd, "nodes", "--feed", feed)
        assert f"the feed offers {NEW} but this daemon runs {OLD}: update this machine first" in caught.value.message
        assert log == [] and (await rd.client.upgrade_status()).state == RolloutState.IDLE

        rd.daemon.upgrades.daemon_version = NEW  # restarted onto NEW: the nodes follow it
        code = await ctl_run(rd, "nodes", "--feed", feed)
        out = capsys.readouterr().out
        assert code == 0, out
        assert f"agent {NEW}: done on 2 node(s)" in out
        assert log == [("alpha", "exit 75"), ("alpha", "back"), ("beta", "exit 75"), ("beta", "back")]
        assert release_server.hits[f"mirbadllm-agent-{NEW}"] == 1  # one build for both nodes' platform


def test_ctl_upgrade_parses_status_and_nodes() -> None:
    assert ctl.parse_args(["upgrade"]).action is None
    args = ctl.parse_args(["upgrade", "nodes", "--folder", "/tmp/release"])
    assert (args.group, args.action, args.folder) == ("upgrade", "nodes", "/tmp/release")
