"""``mirbadllm ctl models updates|update|rollback``: a person sees which pulled model has a newer revision,
updates it, rolls it back, and reads why when there is nothing to update or roll back."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.model_updates import ModelUpdate
from mirbadllm import ctl
from mirbadllm.ctl_model_updates import update_line
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes.fake_hf_hub import COMMIT, FakeHub
from tests.fakes.gguf_files import gguf_bytes


async def ctl_run(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(list(argv)), rd.client)


def test_a_refused_answer_reads_with_its_reason() -> None:
    found = ModelUpdate(model="tiny", hf_repo="acme/x", hf_file="x.gguf", revision="a" * 40, latest="a" * 40,
                        state="refused", reason="the hub changed x.gguf sha256 without a new revision")
    assert update_line(found) == ("tiny  acme/x/x.gguf  refused: the hub changed x.gguf sha256 without a new "
                                  "revision")


async def test_updates_update_and_rollback_from_a_terminal(
        tmp_path: Path, fake_runtime: Path, model_file: Path, hf_env: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", gguf_bytes() + bytes(1000))
    try:
        async with running_daemon(tmp_path / "home", fake_runtime) as rd:
            assert await ctl_run(rd, "models", "pull", "acme/tiny-GGUF:Q4_K_M", "--id", "tiny") == 0
            capsys.readouterr()
            assert await ctl_run(rd, "models", "updates") == 0
            assert capsys.readouterr().out == "no updates: 1 model from the hub checked now\n"

            new = hub.publish("acme/tiny-GGUF", {"tiny-Q4_K_M.gguf": gguf_bytes() + bytes(3000)})
            assert await ctl_run(rd, "models", "updates") == 0
            assert capsys.readouterr().out == (
                f"tiny  acme/tiny-GGUF/tiny-Q4_K_M.gguf  {COMMIT[:12]} -> {new[:12]}  update available: "
                "`mirbadllm ctl models update tiny`\n")

            assert await ctl_run(rd, "models", "update", "tiny") == 0
            out = capsys.readouterr().out
            assert f"updated model 'tiny' to revision {new[:12]}: " in out
            assert "`mirbadllm ctl models rollback tiny`" in out
            assert await ctl_run(rd, "models", "updates", "--cached", "--all") == 0
            assert f"current at {new[:12]}  (can roll back to {COMMIT[:12]})" in capsys.readouterr().out

            assert await ctl_run(rd, "models", "rollback", "tiny") == 0
            assert f"rolled back model 'tiny' to revision {COMMIT[:12]}: " in capsys.readouterr().out

            await rd.client.create_model(model("mine", str(model_file)))
            for argv, code, says in ((("update", "mine"), "no_hub_origin", "was not pulled from the Hugging Face hub"),
                                     (("rollback", "tiny"), "nothing_to_roll_back", "keeps no earlier files")):
                with pytest.raises(DaemonError) as caught:  # `ctl` prints it as "error: <message>", exit 1
                    await ctl_run(rd, "models", *argv)
                assert (caught.value.status, caught.value.code) == (409, code) and says in caught.value.message
    finally:
        await hub.close()
