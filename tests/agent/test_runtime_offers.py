"""What the llama.cpp driver says about itself (``RuntimeOffer``): the version its build really is,
its fingerprint, its path, or why there is none; and that ``AgentStatus`` carries it over mTLS."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

from agent.api.client import AgentClient
from agent.api.runtimes import RuntimeOffer
from agent.deps import build_deps
from agent.identity import server_ssl_context
from agent.paths import AgentPaths
from agent.runtimes.catalog import RuntimeCatalog
from agent.runtimes.checks import ILLEGAL_INSTRUCTION, RuntimeChecks
from agent.runtimes.llamacpp import (
    LlamaCppDriver,
    ReportedVersion,
    offered_version,
    parse_version_output,
)
from agent.server import create_app, start_server
from tests.agent._support import issue_tls
from tests.fakes import FakeGpuProbe, write_fake_runtime

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="the counting runtime is a /bin/sh script")


def _driver(tmp_path: Path, catalog: RuntimeCatalog) -> LlamaCppDriver:
    return LlamaCppDriver(AgentPaths(tmp_path / "agent").ensure(), catalog)


def _counting_runtime(path: Path, version_line: str, count_file: Path) -> Path:
    """A llama-server that counts how often it is asked for its version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho asked >> '{count_file}'\necho '{version_line}' >&2\n")
    path.chmod(0o755)
    return path


def test_version_output_of_a_git_build_and_of_the_sdist_build() -> None:
    git = parse_version_output("version: 4589 (1d1e6a90)\nbuilt with cc for x86_64-linux-gnu\n")
    assert git == ReportedVersion(build=4589, commit="1d1e6a90", text="version: 4589 (1d1e6a90)")
    sdist = parse_version_output("version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0\n")
    assert sdist.build is None and sdist.commit is None  # build 0: no git, so no build number at all
    assert parse_version_output("version: 0.6.0-dev (build 7001, commit 0abc1234)") == ReportedVersion(
        build=7001, commit="0abc1234", text="version: 0.6.0-dev (build 7001, commit 0abc1234)")
    assert parse_version_output("Segmentation fault").build is None


def test_offered_version_says_where_it_comes_from() -> None:
    assert offered_version(ReportedVersion(build=4589, commit="1d1e6a90"), "11434.0.0") == "b4589 (1d1e6a90)"
    assert offered_version(ReportedVersion(), "11434.0.0") == "11434.0.0 (runtime.json)"
    assert offered_version(ReportedVersion(), None) is None


async def test_no_llama_server_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    catalog = RuntimeCatalog(environ={"PATH": ""}, distribution="no-such-distribution", runtime_roots=[])
    offer = await _driver(tmp_path, catalog).offer()
    assert offer.runtime == "llamacpp" and not offer.available
    assert offer.reason and "no llama-server found" in offer.reason and offer.version is None


@posix_only
async def test_version_is_asked_once_per_build_fingerprint(tmp_path: Path) -> None:
    count = tmp_path / "asked"
    exe = _counting_runtime(tmp_path / "bin" / "llama-server", "version: 77 (abcdef12)", count)
    driver = _driver(tmp_path, RuntimeCatalog(exe))
    first, second = await driver.offer(), await driver.offer()
    assert first == second == RuntimeOffer(
        runtime="llamacpp", available=True, version="b77 (abcdef12)",
        digest=driver.checks.fingerprint(exe, None), location=str(exe.absolute()))
    assert count.read_text().count("asked") == 1
    _counting_runtime(exe, "version: 78 (abcdef13)", count)  # a rebuild: another fingerprint
    third = await driver.offer()
    assert third.version == "b78 (abcdef13)" and third.digest != first.digest
    assert count.read_text().count("asked") == 2


async def test_the_sdist_build_reports_its_manifest_version(tmp_path: Path) -> None:
    folder = tmp_path / "runtimes" / "llamacpp-11434.0.0-abc"
    exe = write_fake_runtime(folder / "bin", version="version: 0.6.0-dev (build 0, commit unknown)")
    (folder / "runtime.json").write_text(json.dumps({
        "runtime": "llamacpp", "version": "11434.0.0", "system": platform.system(),
        "machine": platform.machine(), "server": f"bin/{exe.name}"}))
    catalog = RuntimeCatalog(environ={"PATH": ""}, runtime_roots=[tmp_path / "runtimes"])
    offer = await _driver(tmp_path, catalog).offer()
    assert offer.available and offer.version == "11434.0.0 (runtime.json)"
    assert offer.location == str(exe.resolve())


async def test_a_build_seen_to_stop_on_sigill_is_unavailable(tmp_path: Path) -> None:
    exe = write_fake_runtime(tmp_path / "bin")
    driver = _driver(tmp_path, RuntimeCatalog(exe))
    checks: RuntimeChecks = driver.checks
    checks.record(checks.fingerprint(exe, None), "illegal_instruction", str(exe), "stopped on SIGILL")
    offer = await driver.offer()
    assert not offer.available and offer.reason == ILLEGAL_INSTRUCTION and offer.location == str(exe.absolute())


async def test_agent_status_carries_the_llamacpp_offer(tmp_path: Path, port_base: int) -> None:
    exe = write_fake_runtime(tmp_path / "bin")
    home = tmp_path / "agent"
    tls = issue_tls(tmp_path, home / "identity")
    deps = build_deps(home, llama_server=exe, gpu_probe=FakeGpuProbe([]), first_port=port_base)
    runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
    client = AgentClient(f"https://127.0.0.1:{port}", tls.client_context())
    try:
        status = await client.status()
    finally:
        await client.close()
        await runner.cleanup()
    offers = {o.runtime: o for o in status.runtime_offers}
    llamacpp = offers["llamacpp"]
    assert llamacpp.available and llamacpp.version == "b4242 (fa4e1234)"  # the fake's own --version
    assert llamacpp.location == str(exe.absolute()) and llamacpp.digest and len(llamacpp.digest) == 64
