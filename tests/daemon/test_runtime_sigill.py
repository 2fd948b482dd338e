"""A runtime build that stops on SIGILL is named as exactly that: on the model, the Overview, ctl."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.runtimes.checks import ILLEGAL_INSTRUCTION
from app.ui.pages.overview import attention
from app.viewmodels.fleet import FleetSnapshot
from daemon.api.models import ModelState, ModelView
from mirbadllm import ctl
from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_runtime


async def test_sigill_is_reported_on_the_status_the_overview_and_ctl(
        tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exe = write_fake_runtime(tmp_path / "bin", sigill="load")
    policy = {"backoff_s": [3600, 3600, 3600], "probe_interval_s": 3600}  # no restart meanwhile
    async with running_daemon(tmp_path / "home", exe, health=policy) as d:
        await d.client.create_model(model("amx", str(model_file)))
        await d.client.start_model("amx")
        status = await d.wait_state("amx", ModelState.FAILED)
        assert status.error == ILLEGAL_INSTRUCTION

        view = await d.client.get_model("amx")
        snapshot = FleetSnapshot(connected=True, loaded=True,
                                 models=(ModelView(definition=view.definition, status=view.status),))
        (item,) = attention(snapshot)
        assert item[1] == ILLEGAL_INSTRUCTION

        assert await ctl.run(ctl.parse_args(["status"]), d.client) == 0
        assert ILLEGAL_INSTRUCTION in capsys.readouterr().out
