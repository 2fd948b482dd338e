"""A runtime build is checked once per machine, by hash: SIGILL is reported as exactly that."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agent.api.models import InstanceState
from agent.manager import InstanceManager
from agent.runtimes.checks import (
    ILLEGAL_INSTRUCTION,
    RuntimeChecks,
    is_illegal_instruction,
)
from tests.agent._support import make_spec

READY, FAILED = InstanceState.READY, InstanceState.FAILED


async def _wait(manager: InstanceManager, *states: InstanceState, timeout: float = 20.0) -> None:
    reached = await manager.wait_for(lambda: manager.info("m").state in states, timeout)
    assert reached, manager.info("m")


def _verdicts(manager: InstanceManager) -> list[str]:
    path = manager.driver.paths.runtime_checks_file
    if not path.exists():
        return []
    return [c["verdict"] for c in json.loads(path.read_text())["checks"].values()]


async def test_a_build_that_dies_on_sigill_at_load_says_so_and_is_refused_next_time(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(sigill="load"))
    await manager.start(make_spec(model_file))
    await _wait(manager, FAILED)
    info = manager.info("m")
    assert info.error == ILLEGAL_INSTRUCTION
    assert info.error == ("llama-server stopped on an illegal instruction: this build uses CPU features "
                          "this machine cannot run; rebuild it with `make runtime`")
    assert any("loaded CPU backend" in line for line in info.last_log_lines)
    assert _verdicts(manager) == ["illegal_instruction"]
    # The same build is not spawned again: the start fails at once with the same words.
    info = await manager.start(make_spec(model_file))
    assert (info.state, info.error, info.pid) == (FAILED, ILLEGAL_INSTRUCTION, None)


async def test_a_build_that_dies_at_its_first_generation_is_caught_by_the_check(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(sigill="generate"))
    await manager.start(make_spec(model_file))
    await _wait(manager, READY, FAILED)
    await _wait(manager, FAILED)  # the one-token check generates, and the build dies
    assert manager.info("m").error == ILLEGAL_INSTRUCTION
    assert _verdicts(manager) == ["illegal_instruction"]


async def test_a_good_build_is_recorded_once_with_a_one_token_generation(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    exe = fake_runtime()
    manager = make_manager(exe)
    await manager.start(make_spec(model_file))
    await _wait(manager, READY)
    assert await manager.wait_for(lambda: _verdicts(manager) == ["ok"], 10)
    record = json.loads(manager.driver.paths.runtime_checks_file.read_text())["checks"]
    (entry,) = record.values()
    assert entry["executable"] == str(exe) and entry["detail"] == "one-token generation"
    # Another build (one byte changed) is another fingerprint, checked again.
    exe.write_text(exe.read_text() + "\n")
    checks = RuntimeChecks(manager.driver.paths.runtime_checks_file)
    assert checks.verdict(checks.fingerprint(exe, None)) is None


def test_the_fingerprint_covers_the_cpu_variant_libraries(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server = bin_dir / "llama-server"
    server.write_bytes(b"server")
    (bin_dir / "libggml-cpu-icelake.so").write_bytes(b"v1")
    (bin_dir / "notes.txt").write_bytes(b"not a library")
    checks = RuntimeChecks(tmp_path / "checks.json")
    before = checks.fingerprint(server, bin_dir)
    (bin_dir / "notes.txt").write_bytes(b"changed, but not part of the build")
    assert checks.fingerprint(server, bin_dir) == before
    (bin_dir / "libggml-cpu-icelake.so").write_bytes(b"v2")
    assert checks.fingerprint(server, bin_dir) != before


def test_an_unreadable_checks_file_is_ignored_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "checks.json"
    path.write_text("{not json")
    checks = RuntimeChecks(path)
    checks.record("abc", "ok", "/x/llama-server")
    assert json.loads(path.read_text())["checks"]["abc"]["verdict"] == "ok"


def test_illegal_instruction_as_each_os_reports_it() -> None:
    assert is_illegal_instruction(-4)  # POSIX: killed by SIGILL
    assert is_illegal_instruction(0xC000001D) and is_illegal_instruction(-1073741795)  # Windows
    assert not any(is_illegal_instruction(code) for code in (None, 0, 1, -9, -11, 0xC0000005))
