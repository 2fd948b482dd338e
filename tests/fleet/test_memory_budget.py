"""A model's memory budget is what admission holds for it on its node, in place of the GGUF estimate."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from tests.daemon.harness import RunningDaemon, model
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent

# 32 layers, 32 KV heads: 16 GiB of KV cache at its 32K context, more than the node has.
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}


@pytest.fixture
async def agent(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[InProcessAgent]:
    memory = FakeMemoryProbe(total=16 * GiB, available=12 * GiB)
    started = await start_inprocess_agent(tmp_path / "agent", name="budget", llama_server=runtime_exe,
                                          memory_probe=memory)
    yield started
    await started.close()


async def refusal(rd: RunningDaemon, model_id: str) -> DaemonError:
    with pytest.raises(DaemonError) as refused:
        await rd.client.start_model(model_id)
    return refused.value


async def test_the_budget_replaces_the_estimate_in_admission(agent: InProcessAgent, rd: RunningDaemon,
                                                             tmp_path: Path, model_file: Path) -> None:
    pairing = await agent.wait_event("pairing")
    node = await rd.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", pairing["code"], pairing["fingerprint"])
    short = node.id[:12]  # what `ctl nodes list` shows: stored under the full id

    # A budget larger than the node's free memory is refused with the figures, unless forced.
    saved = await rd.client.create_model(model("roomy", str(model_file), node=short, memory_budget_gib=20))
    assert saved.definition.node == node.id
    error = await refusal(rd, "roomy")
    assert (error.status, error.code) == (409, "insufficient_memory")
    assert "memory budget of 20.00 GiB" in error.message and "12.00 GiB available" in error.message
    assert "1.00 GiB kept in reserve" in error.message and "force" in error.message
    refused = (await rd.client.get_model("roomy")).status  # failed, saying why, until started again
    assert refused.state == ModelState.FAILED and "memory budget of 20.00 GiB" in (refused.error or "")
    forced = await rd.client.start_model("roomy", wait=True, force=True)
    assert forced.state == ModelState.READY, forced.error
    await rd.client.stop_model("roomy")

    # A model whose estimate does not fit starts with a small budget.
    big = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    await rd.client.create_model(model("estimated", str(big), node=node.id))
    error = await refusal(rd, "estimated")
    assert (error.status, error.code) == (409, "insufficient_memory") and "needs" in error.message
    await rd.client.create_model(model("budgeted", str(big), node=node.id, memory_budget_gib=2))
    ready = await rd.client.start_model("budgeted", wait=True)
    assert ready.state == ModelState.READY, ready.error
