"""The agent's side of an upgrade: a build of the wrong size or SHA-256 is refused and nothing replaced."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent.api.upgrade import AgentUpgradeOffer
from agent.upgrade import (
    AgentUpgrades,
    FileInstaller,
    UpgradeRefused,
    installer_for,
    reported_version,
)

PLATFORM = "agent-linux-x86_64"
BUILD = b"0.2.0\n"


def body(data: bytes, chunk: int = 2) -> Callable[[], AsyncIterator[bytes]]:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(data), chunk):
            yield data[i:i + chunk]
    return chunks


def offer(data: bytes = BUILD, **update: object) -> AgentUpgradeOffer:
    fields = {"platform": PLATFORM, "version": "0.2.0", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return AgentUpgradeOffer.model_validate({**fields, **update})


def upgrades(tmp_path: Path) -> tuple[AgentUpgrades, Path, list[str]]:
    target = tmp_path / "version.txt"
    target.write_text("0.1.0\n")
    restarted: list[str] = []
    return (AgentUpgrades(tmp_path / "upgrades", FileInstaller(target), "0.1.0",
                          on_installed=lambda: restarted.append("restart"), this_platform=PLATFORM),
            target, restarted)


@pytest.mark.parametrize(("sent", "check"), [
    (b"0.2.1\n", "checksum check failed"),      # same size, other bytes
    (b"0.2.0\n\n", "size check failed"),        # one byte more than the feed names
    (b"0.2\n", "size check failed"),            # short
])
async def test_a_build_that_is_not_the_one_offered_is_refused_and_nothing_is_replaced(
        tmp_path: Path, sent: bytes, check: str) -> None:
    agent, target, _ = upgrades(tmp_path)
    with pytest.raises(UpgradeRefused) as refused:
        await agent.receive(offer(), body(sent))
    assert refused.value.status == 422 and refused.value.code == "upgrade_refused"
    assert check in refused.value.message and "nothing was replaced" in refused.value.message
    assert target.read_text() == "0.1.0\n" and not target.with_name("version.txt.old").exists()
    assert list((tmp_path / "upgrades").iterdir()) == []  # no partial left behind
    assert reported_version("0.0.0", {"MIRBADLLM_AGENT_VERSION_FILE": str(target)}) == "0.1.0"
    # A refusal leaves the agent able to take the right build.
    answer = await agent.receive(offer(), body(BUILD))
    assert (answer.version, answer.previous_version) == ("0.2.0", "0.1.0")


async def test_a_build_for_another_platform_is_refused(tmp_path: Path) -> None:
    agent, target, _ = upgrades(tmp_path)
    with pytest.raises(UpgradeRefused, match="the build is for agent-macos-arm64"):
        await agent.receive(offer(platform="agent-macos-arm64"), body(BUILD))
    assert target.read_text() == "0.1.0\n"


async def test_the_verified_build_replaces_the_target_and_keeps_the_previous(tmp_path: Path) -> None:
    agent, target, _ = upgrades(tmp_path)
    await agent.receive(offer(), body(BUILD))
    assert target.read_text() == "0.2.0\n" and target.with_name("version.txt.old").read_text() == "0.1.0\n"
    assert reported_version("0.0.0", {"MIRBADLLM_AGENT_VERSION_FILE": str(target)}) == "0.2.0"
    with pytest.raises(Exception, match="already being installed"):  # this agent is restarting now
        await agent.receive(offer(), body(BUILD))


async def test_an_agent_without_an_upgrade_target_says_so(tmp_path: Path) -> None:
    agent = AgentUpgrades(tmp_path / "upgrades", installer_for(None, {}), "0.1.0", this_platform=PLATFORM)
    with pytest.raises(Exception, match="--upgrade-target") as refused:
        await agent.receive(offer(), body(BUILD))
    assert getattr(refused.value, "code", None) == "upgrade_unsupported"
