"""Boot auto-start goes one model at a time per node, the nodes in parallel: a slow node holds up no other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from daemon.api.models import ModelState
from tests.daemon.harness import model, running_daemon
from tests.fleet.inprocess import start_inprocess_agent

MONITOR = {"interval_s": 0.5, "probe_timeout_s": 1.0}


async def test_a_node_whose_start_never_completes_does_not_hold_up_another(
        tmp_path: Path, runtime_exe: Path, fake_runtime: Callable[..., Path], model_file: Path) -> None:
    slow_node = await start_inprocess_agent(tmp_path / "agent", name="slow",
                                            llama_server=fake_runtime(load_seconds=600))
    home = tmp_path / "daemon"
    try:
        async with running_daemon(home, runtime_exe, nodes=MONITOR) as rd:
            pairing = await slow_node.wait_event("pairing")
            node = await rd.client.pair_node(f"127.0.0.1:{slow_node.lifecycle.port}", pairing["code"],
                                             pairing["fingerprint"])
            # Registered first, so a fleet-wide queue would wait on it before the local model.
            await rd.client.create_model(model("loads-forever", str(model_file), node=node.id, auto_start=True))
            await rd.client.create_model(model("quick", str(model_file), auto_start=True))

        async with running_daemon(home, runtime_exe, nodes=MONITOR) as rd:  # the next boot auto-starts both
            ready = await rd.wait_state("quick", ModelState.READY, ModelState.FAILED, timeout=60)
            assert ready.state == ModelState.READY, ready.error
            assert (await rd.client.get_model("loads-forever")).status.state == ModelState.STARTING
    finally:
        await slow_node.close()
