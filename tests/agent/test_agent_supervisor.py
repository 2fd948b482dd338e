"""Supervising a runtime through its whole life, with the fake llama-server and its faults."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil
import pytest

from agent.api.models import InstanceState
from agent.manager import AlreadyRunning, InstanceManager
from agent.runtimes.llamacpp import NoRuntime, SpecRejected, child_env
from agent.runtimes.ports import find_free_port
from tests.agent._support import eventually, make_spec

READY = InstanceState.READY


async def _wait_state(manager: InstanceManager, instance_id: str, *states: InstanceState,
                      timeout: float = 20.0) -> None:
    reached = await manager.wait_for(lambda: manager.info(instance_id).state in states, timeout)
    assert reached, f"{instance_id} is {manager.info(instance_id)}"


async def test_start_becomes_ready_and_serves_with_its_key(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime())
    info = await manager.start(make_spec(model_file, served_name="Tiny"))
    assert info.state is InstanceState.STARTING
    await _wait_state(manager, "m", READY)
    info = manager.info("m")
    assert info.endpoint == f"http://127.0.0.1:{info.port}" and info.pid and info.api_key
    assert info.argv[1:5] == ["--model", str(model_file), "--alias", "Tiny"]
    # The key is in the environment, not on the command line.
    assert info.api_key not in " ".join(psutil.Process(info.pid).cmdline())
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{info.endpoint}/v1/models") as resp:
            assert (await resp.json())["data"][0]["id"] == "Tiny"
        async with http.get(f"{info.endpoint}/slots") as resp:
            assert resp.status == 401
        async with http.get(f"{info.endpoint}/slots", headers={"Authorization": f"Bearer {info.api_key}"}) as resp:
            assert resp.status == 200
    records = json.loads(manager.records.path.read_text())["processes"]
    assert [(r["instance_id"], r["pid"], r["port"]) for r in records] == [("m", info.pid, info.port)]
    assert manager.records.path.stat().st_mode & 0o777 == 0o600
    assert "main: model loaded" in manager.get("m").logs.tail(50)


async def test_slow_load_that_keeps_logging_moves_the_deadline(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(load_seconds=2.5))
    await manager.start(make_spec(model_file, startup_timeout_s=1.0))
    await _wait_state(manager, "m", READY, InstanceState.FAILED)
    assert manager.info("m").state is READY, manager.info("m").error


async def test_silent_load_past_the_deadline_fails_and_is_killed(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(load_seconds=60, load_quiet=True))
    pid = (await manager.start(make_spec(model_file, startup_timeout_s=1.0))).pid
    await _wait_state(manager, "m", InstanceState.FAILED)
    info = manager.info("m")
    assert "was not ready and wrote nothing for 1 s" in (info.error or "")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_exit_at_start_names_the_code_and_last_line(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(exit_code=3))
    await manager.start(make_spec(model_file))
    await _wait_state(manager, "m", InstanceState.FAILED)
    info = manager.info("m")
    assert info.error == "llama-server exited 3: main: exiting due to model loading error"
    assert info.exit_code == 3 and info.pid is None
    assert any("error loading model" in line for line in info.last_log_lines)
    assert json.loads(manager.records.path.read_text())["processes"] == []


async def test_crash_after_ready_is_failed_not_stopped(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(crash_after_s=0.3, crash_exit_code=7))
    await manager.start(make_spec(model_file))
    await _wait_state(manager, "m", READY)
    await _wait_state(manager, "m", InstanceState.FAILED)
    info = manager.info("m")
    assert info.exit_code == 7 and info.stop_requested is False
    assert info.error == "llama-server exited 7: GGML_ASSERT: fake crash as asked (FAKE_CRASH_AFTER_S)"
    # A failed instance may be started again.
    await manager.start(make_spec(model_file))
    await _wait_state(manager, "m", READY, InstanceState.FAILED)


async def test_stop_terminates_the_process_group(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime())
    await manager.start(make_spec(model_file))
    await _wait_state(manager, "m", READY)
    pid = manager.info("m").pid
    version = manager.version
    info = await manager.stop("m", timeout=10)
    assert (info.state, info.exit_code, info.stop_requested, info.pid) == (InstanceState.STOPPED, 0, True, None)
    assert manager.version >= version + 2  # stopping, stopped
    assert not psutil.pid_exists(pid)
    assert json.loads(manager.records.path.read_text())["processes"] == []
    assert (await manager.stop("m")).state is InstanceState.STOPPED  # idempotent


async def test_sigterm_ignored_means_sigkill(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime(ignore_sigterm=True))
    await manager.start(make_spec(model_file))
    await _wait_state(manager, "m", READY)
    info = await manager.stop("m", timeout=0.5)
    assert (info.state, info.exit_code) == (InstanceState.STOPPED, -9)


async def test_second_start_of_a_running_instance_is_refused(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime())
    await manager.start(make_spec(model_file))
    with pytest.raises(AlreadyRunning):
        await manager.start(make_spec(model_file))


async def test_ports_are_the_lowest_free_and_never_shared(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path,
        port_base: int) -> None:
    manager = make_manager(fake_runtime())
    with socket.socket() as squatter:  # something else on the machine holds the first port
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # an earlier test's TIME_WAIT
        squatter.bind(("127.0.0.1", port_base))
        squatter.listen()
        first = await manager.start(make_spec(model_file, "a"))
        second = await manager.start(make_spec(model_file, "b"))
    assert (first.port, second.port) == (port_base + 1, port_base + 2)
    await _wait_state(manager, "a", READY)
    await _wait_state(manager, "b", READY)


def test_find_free_port_skips_ports_of_other_instances(port_base: int) -> None:
    assert find_free_port([port_base, port_base + 1], port_base) == port_base + 2


async def test_env_allowlist(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime())
    for bad in ("LD_PRELOAD", "PYTHONOPTIMIZE", "LLAMA_ARG_PORT", "HF_ENDPOINT", "LLAMA_API_KEY"):
        with pytest.raises(SpecRejected, match=bad):
            await manager.start(make_spec(model_file, env={bad: "1"}))
    with pytest.raises(SpecRejected, match="--api-key"):
        await manager.start(make_spec(model_file, extra_args=["--api-key", "mine"]))
    spec = make_spec(model_file, env={"CUDA_VISIBLE_DEVICES": "0", "GGML_SCHED_MAX_COPIES": "1"})
    await manager.start(spec)
    await _wait_state(manager, "m", READY)  # after the exec, not the fork
    info = manager.info("m")
    environ = psutil.Process(info.pid).environ()
    assert environ["CUDA_VISIBLE_DEVICES"] == "0" and environ["GGML_SCHED_MAX_COPIES"] == "1"
    assert environ["LLAMA_API_KEY"] == info.api_key


def test_child_env_is_the_base_plus_the_spec() -> None:
    agent_env = {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "SECRET_TOKEN": "x", "LD_PRELOAD": "evil.so"}
    env = child_env({"OMP_NUM_THREADS": "2"}, "k", Path("/opt/llama"), agent_env)
    assert env == {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "LD_LIBRARY_PATH": "/opt/llama",
                   "DYLD_LIBRARY_PATH": "/opt/llama", "OMP_NUM_THREADS": "2", "LLAMA_API_KEY": "k"}


async def test_missing_model_and_missing_runtime_are_refused(
        make_manager: Callable[..., InstanceManager], model_file: Path, tmp_path: Path) -> None:
    manager = make_manager(None)
    with pytest.raises(SpecRejected, match="model file not found"):
        await manager.start(make_spec(tmp_path / "nope.gguf"))
    with pytest.raises(NoRuntime, match="--llama-server"):
        await manager.start(make_spec(model_file))


async def test_log_ring_follows_the_file(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    manager = make_manager(fake_runtime())
    await manager.start(make_spec(model_file))
    ring = manager.get("m").logs
    await eventually(lambda: "srv  update_slots: all slots are idle" in ring.tail(100), what="log lines")
    log_file = manager.driver.paths.instance_log("m")
    assert "main: model loaded" in log_file.read_text()


async def test_an_executable_that_cannot_run_is_failed_with_the_reason(
        make_manager: Callable[..., InstanceManager], model_file: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "llama-server"
    broken.parent.mkdir()
    broken.write_text("#!/no/such/interpreter\n")
    broken.chmod(0o755)
    manager = make_manager(broken)
    info = await manager.start(make_spec(model_file))
    assert info.state is InstanceState.FAILED
    assert (info.error or "").startswith("cannot start the runtime: [Errno 2]")


async def test_a_server_that_took_the_port_first_is_not_mistaken_for_the_runtime(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    """/health is public, so a foreign server on the port would pass it; only our key proves it is ours."""
    from aiohttp import web

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def refuse(_request: web.Request) -> web.Response:
        return web.json_response({"error": {"code": 401, "message": "Invalid API Key"}}, status=401)

    foreign = web.Application()
    foreign.router.add_get("/health", health)
    foreign.router.add_get("/slots", refuse)
    manager = make_manager(fake_runtime(bind_delay_s=1.5))
    info = await manager.start(make_spec(model_file))
    runner = web.AppRunner(foreign)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", info.port).start()  # in the gap between the probe and the bind
    try:
        await _wait_state(manager, "m", READY, InstanceState.FAILED)
        failed = manager.info("m")
        assert failed.state is InstanceState.FAILED, "a foreign server was taken for the runtime"
        assert "couldn't bind" in (failed.error or "")
    finally:
        await runner.cleanup()
