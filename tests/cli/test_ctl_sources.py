"""``mirbadllm ctl models pull|import``: a person pulls, imports and cancels, and reads what was added."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.api.sources import TransferState
from daemon.api.sources import Transfer
from mirbadllm import ctl
from mirbadllm.ctl_sources import progress_line, report
from tests.agent.test_imports import ollama_store
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes, write_gguf


async def ctl_run(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(list(argv)), rd.client)


def test_the_progress_bar_shows_the_share_and_the_sizes() -> None:
    t = Transfer(id="x1", kind="hf", label="acme/x Q4_K_M", stage="downloading", bytes_done=3 << 20,
                 bytes_total=12 << 20)
    assert progress_line(t, width=8) == "[##......]  25 %  3.0 MiB/12.0 MiB  downloading"


def test_a_reimport_names_the_model_that_already_runs_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    done = Transfer(id="x2", kind="folder", label="/models", state=TransferState.DONE, existing=["tiny"])
    assert report(done) == 0
    out = capsys.readouterr().out
    assert "already added as model 'tiny' (not registered again)" in out and "nothing registered" not in out


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch, hf_env: None) -> FakeHub:
    fake = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", fake.hub_url)
    yield fake  # type: ignore[misc]
    await fake.close()


async def test_pull_by_quant_registers_the_model_and_says_how_to_start_it(
        tmp_path: Path, fake_runtime: Path, hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    hub.add("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", gguf_bytes() + bytes(300_000))
    hub.add("acme/tiny-GGUF", "tiny-Q8_0.gguf", gguf_bytes() + bytes(1000))
    hub.add("acme/one-GGUF", "one-f16.gguf", gguf_bytes())
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await ctl_run(rd, "models", "pull", "acme/tiny-GGUF:q4_k_m") == 0
        out, err = capsys.readouterr()
        assert "added model 'tiny-q4-k-m'" in out and "mirbadllm ctl models start tiny-q4-k-m" in out
        assert "tiny-Q4_K_M.gguf" in out and "downloading" in err
        view = await rd.client.get_model("tiny-q4-k-m")
        assert view.definition.model_path.endswith("tiny-Q4_K_M.gguf")

        assert await ctl_run(rd, "models", "pull", "acme/one-GGUF", "--id", "one") == 0
        assert "added model 'one'" in capsys.readouterr().out

        assert await ctl_run(rd, "models", "pull", "acme/tiny-GGUF") == 1
        err = capsys.readouterr().err
        assert "tiny-Q4_K_M.gguf" in err and "tiny-Q8_0.gguf" in err and "acme/tiny-GGUF:QUANT" in err
        assert {m.definition.id for m in await rd.client.list_models()} == {"tiny-q4-k-m", "one"}


async def test_import_from_ollama_and_from_a_folder(tmp_path: Path, fake_runtime: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    store = ollama_store(tmp_path / "ollama", name="tiny", tag="1b")
    write_gguf(tmp_path / "mine" / "alpha.gguf")
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await ctl_run(rd, "models", "import", "ollama", "tiny:1b", "--store", str(store)) == 0
        assert "added model 'tiny-1b'" in capsys.readouterr().out
        assert await ctl_run(rd, "models", "import", "folder", str(tmp_path / "mine")) == 0
        assert "added model 'alpha'" in capsys.readouterr().out
        assert await ctl_run(rd, "models", "import", "ollama", "nothing:here", "--store", str(store)) == 1
        assert "error: " in capsys.readouterr().err


async def test_ctrl_c_cancels_the_download(tmp_path: Path, fake_runtime: Path, hub: FakeHub,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    hub.add("acme/slow", "slow-Q4_0.gguf", gguf_bytes() + bytes(4_000_000), chunk_delay=0.05)
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        pulling = asyncio.create_task(ctl_run(rd, "models", "pull", "acme/slow:Q4_0"))
        while not [t for t in await rd.client.transfers() if t.bytes_done > 0]:
            await rd.client.events((await rd.client.status()).last_event_id, timeout=1)
        pulling.cancel()  # what asyncio.run does to the command on Ctrl-C
        with pytest.raises(asyncio.CancelledError):
            await pulling
        assert "cancelled acme/slow" in capsys.readouterr().err
        [transfer] = await rd.client.transfers()
        assert transfer.state == TransferState.CANCELLED and await rd.client.list_models() == []
