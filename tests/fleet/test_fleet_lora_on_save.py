"""LoRA adapters of a model on a second node, read there when the definition is saved: refused while
the node is online and says the file is no LoRA for the model; saved while it is offline (its agent
checks again at start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.api.client import DaemonError
from tests.daemon.harness import model, running_daemon
from tests.fakes.gguf_files import write_gguf
from tests.fleet.agents import eventually
from tests.fleet.test_fleet_loopback import FAST_MONITOR, pair

pytestmark = pytest.mark.slow

LORA = {"general.type": "adapter", "adapter.type": "lora"}


async def test_a_wrong_adapter_is_refused_while_its_node_is_online_and_saved_while_it_is_offline(
        agents: Any, tmp_path: Path) -> None:
    beta = await agents("beta")
    folder = beta.home / "models" / "tuned"
    base = write_gguf(folder / "base.gguf", arch="llama")
    wrong = write_gguf(folder / "qwen-lora.gguf", arch="qwen2", layers=0, extra=LORA)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        beta_id = await pair(rd, beta)
        link = rd.daemon.links.get(beta_id)
        assert link is not None
        await eventually(lambda: link.online, what="beta online")
        definition = model("tuned", str(base), node=beta_id, adapters=[{"name": "q", "file": str(wrong)}])
        with pytest.raises(DaemonError) as refused:
            await rd.client.create_model(definition)
        assert refused.value.status == 422
        assert "is an adapter for architecture 'qwen2', not for the model's 'llama'" in refused.value.message

        await beta.terminate()
        await eventually(lambda: not link.online, what="beta offline")
        saved = await rd.client.create_model(definition)
        assert saved.definition.node == beta_id and saved.definition.adapters[0].file == str(wrong)
