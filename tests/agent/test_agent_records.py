"""Process records: a restarted agent adopts what still runs, and only that."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil

from agent.api.models import InstanceState
from agent.manager import InstanceManager
from agent.records import ProcessRecord, ProcessRecords, find_live_process
from tests.agent._support import eventually, make_spec


async def _ready(manager: InstanceManager, instance_id: str = "m") -> None:
    ok = await manager.wait_for(lambda: manager.info(instance_id).state is InstanceState.READY, 20)
    assert ok, manager.info(instance_id)


async def test_a_new_agent_adopts_a_live_runtime(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    first = make_manager(fake_runtime())
    await first.start(make_spec(model_file, served_name="Tiny"))
    await _ready(first)
    before = first.info("m")
    await first.close()  # the agent goes away; the runtime must not

    second = make_manager(None)  # no runtime executable needed to adopt
    assert await second.adopt_recorded() == ["m"]
    await _ready(second)
    after = second.info("m")
    assert (after.pid, after.port, after.api_key, after.adopted) == (before.pid, before.port, before.api_key, True)
    assert after.config_hash == before.config_hash and after.argv == before.argv
    assert "main: model loaded" in second.get("m").logs.tail(100)  # the log file is tailed again
    async with aiohttp.ClientSession() as http, \
            http.post(f"{after.endpoint}/v1/chat/completions", headers={"Authorization": f"Bearer {after.api_key}"},
                      json={"messages": [{"role": "user", "content": "hi"}]}) as resp:
        assert resp.status == 200
        assert (await resp.json())["model"] == "Tiny"

    info = await second.stop("m", timeout=10)  # not our child: signalled and watched through psutil
    assert info.state is InstanceState.STOPPED
    await eventually(lambda: not psutil.pid_exists(before.pid)
                     or psutil.Process(before.pid).status() == psutil.STATUS_ZOMBIE, what="runtime gone")


async def test_an_adopted_runtime_that_dies_is_failed(
        make_manager: Callable[..., InstanceManager], fake_runtime: Callable[..., Path], model_file: Path) -> None:
    first = make_manager(fake_runtime())
    await first.start(make_spec(model_file))
    await _ready(first)
    pid = first.info("m").pid
    await first.close()
    second = make_manager(None)
    await second.adopt_recorded()
    await _ready(second)
    os.killpg(pid, signal.SIGKILL)
    assert await second.wait_for(lambda: second.info("m").state is InstanceState.FAILED, 20)
    info = second.info("m")
    assert info.stop_requested is False and (info.error or "").startswith("llama-server exited")


def _exited_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def _record(pid: int, create_time: float, executable: str) -> ProcessRecord:
    return ProcessRecord(instance_id="m", pid=pid, create_time=create_time, executable=executable,
                         process_exe=executable, port=18080, api_key="k", argv=[executable], model_path="/m.gguf",
                         served_name="m", config_hash="0", started_at=time.time())


async def test_a_recycled_pid_is_not_adopted(
        make_manager: Callable[..., InstanceManager], tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])  # noqa: ASYNC220 - returns at once
    try:
        handle = psutil.Process(sleeper.pid)
        real_exe = handle.exe()
        records = ProcessRecords(tmp_path / "agent" / "processes.json")
        # Same PID, but the record's process started at another time (the PID was reused) ...
        records.save({"m": _record(sleeper.pid, handle.create_time() - 100, real_exe)})
        manager = make_manager(None)
        assert await manager.adopt_recorded() == []
        assert json.loads(records.path.read_text())["processes"] == []
        # ... or the same start time but another program.
        assert find_live_process(_record(sleeper.pid, handle.create_time(), "/usr/bin/llama-server")) is None
        assert find_live_process(_record(sleeper.pid, handle.create_time(), real_exe)) is not None
        assert sleeper.poll() is None  # and it was left alone
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_a_gone_pid_is_dropped(make_manager: Callable[..., InstanceManager], tmp_path: Path) -> None:
    records = ProcessRecords(tmp_path / "agent" / "processes.json")
    records.save({"m": _record(_exited_pid(), time.time(), "/bin/true")})
    manager = make_manager(None)
    assert await manager.adopt_recorded() == []
    assert ProcessRecords(records.path).load() == {}


def test_records_survive_a_round_trip_and_ignore_garbage(tmp_path: Path) -> None:
    records = ProcessRecords(tmp_path / "processes.json")
    record = _record(123, 1.5, "/bin/x")
    records.save({"m": record})
    assert ProcessRecords(records.path).load() == {"m": record}
    assert records.path.stat().st_mode & 0o777 == 0o600
    records.path.write_text("{not json")
    assert ProcessRecords(records.path).load() == {}


def test_models_and_rpc_servers_each_write_their_own_part(tmp_path: Path) -> None:
    """One processes.json, two owners: a model's save keeps the rpc-servers' records, and the other
    way round; adoption reads only the models' part (an rpc-server is a leftover to stop)."""
    path = tmp_path / "processes.json"
    model = _record(123, 1.5, "/bin/x")
    rpc = _record(456, 2.5, "/bin/rpc").model_copy(update={"instance_id": "rpc:grant-0001", "runtime": "rpc",
                                                           "rpc_server": True})
    ProcessRecords(path).save({"rpc:grant-0001": rpc}, rpc=True)
    models = ProcessRecords(path)  # a later agent: its first save keeps what it has not read yet
    models.save({"m": model})
    assert ProcessRecords(path).load() == {"m": model}
    assert ProcessRecords(path).load(rpc=True) == {"rpc:grant-0001": rpc}
    models.save({}, rpc=True)
    assert (ProcessRecords(path).load(), ProcessRecords(path).load(rpc=True)) == ({"m": model}, {})


def test_a_version_1_file_still_tells_its_rpc_servers_from_its_models(tmp_path: Path) -> None:
    """An agent upgraded while a split model ran: its old file named an rpc-server by its runtime
    ("rpc"); the new agent still stops that one as a leftover and adopts only the model."""
    path = tmp_path / "processes.json"
    model = _record(123, 1.5, "/bin/x")
    rpc = {**model.model_dump(exclude={"rpc_server"}), "instance_id": "rpc:grant-0001", "runtime": "rpc", "pid": 456}
    path.write_text(json.dumps({"version": 1, "processes": [model.model_dump(exclude={"rpc_server"}), rpc]}))
    records = ProcessRecords(path)
    assert records.load() == {"m": model}
    assert [(i, r.pid, r.rpc_server) for i, r in records.load(rpc=True).items()] == [("rpc:grant-0001", 456, True)]
    records.save({})  # written back as version 2: the rpc-server's record says what it is
    assert json.loads(path.read_text())["version"] == 2
    assert list(ProcessRecords(path).load(rpc=True)) == ["rpc:grant-0001"]
