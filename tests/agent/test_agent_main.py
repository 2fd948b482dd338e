"""``python -m agent``: the agent as a child process, the way the daemon runs its local agent."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from agent.api.client import AgentClient
from agent.main import main
from tests.agent._support import issue_tls


def test_without_a_pinned_ca_and_no_pairing_it_says_to_pair(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path / "agent"), "--port", "0", "--no-pairing"]) == 2
    err = capsys.readouterr().err
    assert "not paired" in err and "--ca FILE" in err
    assert (tmp_path / "agent" / "identity" / "agent.key").exists()


async def test_an_unpaired_agent_prints_a_code_and_unpair_makes_a_new_identity(tmp_path: Path) -> None:
    home = tmp_path / "agent"
    events = []
    for extra in ([], ["--unpair"]):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent", "--home", str(home), "--host", "127.0.0.1", "--port", "0",
            "--no-mdns", "--name", "box", *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            listening = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            pairing = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            assert (listening["event"], listening["paired"], pairing["event"]) == ("listening", False, "pairing")
            assert pairing["fingerprint"] == listening["node_id"] and pairing["expires_in_s"] == 600
            events.append(pairing)
            proc.terminate()
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
        assert f"Pairing code:  {pairing['code']}" in stderr and "Fingerprint:" in stderr
    assert events[0]["fingerprint"] != events[1]["fingerprint"]  # --unpair: a new key, a new node


async def test_runs_as_a_child_and_stops_on_sigterm(tmp_path: Path, fake_runtime) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "agent"
    tls = issue_tls(tmp_path, home / "identity")
    (home / "identity" / "ca.crt").unlink()  # pinned below, through --ca
    exe = fake_runtime()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", "--home", str(home), "--host", "127.0.0.1", "--port", "0",
        "--ca", str(tls.ca_file), "--llama-server", str(exe), "--telemetry-interval", "0.5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        event = json.loads(line)
        assert event["event"] == "listening" and event["host"] == "127.0.0.1"
        client = AgentClient(f"https://127.0.0.1:{event['port']}", tls.client_context())
        try:
            status = await client.status()
        finally:
            await client.close()
        assert status.node_id == event["node_id"]
        assert status.runtimes["llamacpp"] == str(exe)
        assert (home / "identity" / "ca.crt").read_bytes() == tls.ca_file.read_bytes()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
    assert "listening on 127.0.0.1" in stderr
