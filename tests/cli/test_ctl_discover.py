"""``ctl models search|files|catalog``, ``ctl models pull NAME`` and ``mirbadllm run NAME``: a person
finds a model on the (fake) hub, reads its quants, and gets a catalog model by its short name."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.hub import is_short_name, model_id_of
from mirbadllm import ctl
from tests.cli.test_run_chat import ANSWER, TEMPLATE, Terminal
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.daemon.test_hub_api import add_bartowski
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes, write_gguf

GEMMA = ("ggml-org/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf")  # gemma3:1b in the catalog


async def ctl_run(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(list(argv)), rd.client)


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch, hf_env: None) -> AsyncIterator[FakeHub]:
    fake = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", fake.hub_url)
    add_bartowski(fake)
    yield fake
    await fake.close()


async def test_search_and_files_print_the_hits_and_the_quants(
        tmp_path: Path, hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        assert await ctl_run(rd, "models", "search", "qwen3", "8b") == 0
        out, err = capsys.readouterr()
        lines = out.splitlines()
        assert lines[0].split() == ["REPOSITORY", "DOWNLOADS", "LIKES", "UPDATED"]
        assert lines[1].split() == ["unsloth/Qwen3-8B-GGUF", "150.0k", "300", "2025-05-01", "gated"]
        assert lines[2].split() == ["bartowski/Qwen3-8B-GGUF", "90.0k", "120", "2025-05-02"]
        assert "mirbadllm ctl models files unsloth/Qwen3-8B-GGUF" in err

        assert await ctl_run(rd, "models", "files", "bartowski/Qwen3-8B-GGUF") == 0
        out, err = capsys.readouterr()
        assert "Q4_K_M" in out and "Qwen3-8B-Q4_K_M.gguf" in out
        assert "Qwen3-8B-Q8_0-00001-of-00002.gguf  (2 parts)" in out
        assert "vision projector mmproj-Qwen3-8B-f16.gguf" in out
        assert "mirbadllm ctl models pull bartowski/Qwen3-8B-GGUF:Q4_K_M" in err


async def test_each_dead_end_is_a_message_and_a_failing_exit(
        tmp_path: Path, hub: FakeHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub.describe("meta-llama/Gated-GGUF")
    hub.add("meta-llama/Gated-GGUF", "gated-Q4_K_M.gguf", gguf_bytes())
    hub.refused.add("meta-llama/Gated-GGUF")
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        cases = [(("search", "zzz-nothing"), "no GGUF repository on the hub matches 'zzz-nothing'"),
                 (("files", "Qwen/Qwen3-8B"), "holds no GGUF model"),
                 (("files", "meta-llama/Gated-GGUF"), "is gated or private: the hub answered 403"),
                 (("files", "nobody/nothing-GGUF"), "no repository nobody/nothing-GGUF on the hub"),
                 (("pull", "nothing:1b"), "'nothing:1b' is not in the catalog")]
        for argv, said in cases:
            assert await _guarded(rd, "models", *argv) == 1, argv
            assert said in capsys.readouterr().err, argv
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
        assert await _guarded(rd, "models", "search", "qwen") == 1
        assert "cannot reach the Hugging Face hub" in capsys.readouterr().err
        assert await rd.client.list_models() == [] and await rd.client.transfers() == []  # nothing half-registered


async def _guarded(rd: RunningDaemon, *argv: str) -> int:
    """``ctl``'s own error handling (``run_with_client``'s): a daemon error is a message and exit 1."""
    try:
        return await ctl_run(rd, *argv)
    except DaemonError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1


async def test_pull_by_short_name_downloads_registers_it_as_that_name_once(
        tmp_path: Path, fake_runtime: Path, hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    hub.add(*GEMMA, gguf_bytes() + bytes(2000))
    hub.add(GEMMA[0], "gemma-3-1b-it-Q8_0.gguf", gguf_bytes())
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await ctl_run(rd, "models", "pull", "gemma3:1b") == 0
        out, err = capsys.readouterr()
        assert "added model 'gemma3-1b'" in out and "gemma-3-1b-it-Q4_K_M.gguf" in err
        view = await rd.client.get_model("gemma3-1b")
        assert view.definition.served_name == "gemma3:1b"
        assert view.definition.model_path.endswith("gemma-3-1b-it-Q4_K_M.gguf")

        assert await ctl_run(rd, "models", "pull", "GEMMA3:1b") == 0  # nothing missing: nothing fetched
        assert "already here as model 'gemma3-1b'" in capsys.readouterr().out
        assert len(await rd.client.transfers()) == 1

        assert await ctl_run(rd, "models", "catalog") == 0
        out = capsys.readouterr().out
        assert "up to 8 GB:" in out and "gemma3:1b" in out and "32 GB and more:" in out


async def test_run_offers_a_catalog_model_and_downloads_it_with_yes(
        tmp_path: Path, fake_runtime: Path, hub: FakeHub) -> None:
    chat_model = write_gguf(tmp_path / "src" / "chat.gguf", extra=TEMPLATE).read_bytes()
    hub.add(*GEMMA, chat_model)
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        asked = await Terminal.open(rd, "gemma3:1b")  # stdin is a pipe: no one to ask
        code, err = await asked.finish()
        assert code == 1 and "mirbadllm run gemma3:1b --yes" in err and await rd.client.list_models() == []

        term = await Terminal.open(rd, "gemma3:1b", "--yes")
        await term.type("hello")
        await term.until(ANSWER)
        code, err = await term.finish()
        assert code == 0, err
        assert [m.definition.served_name for m in await rd.client.list_models()] == ["gemma3:1b"]


def test_short_names_become_model_ids() -> None:
    assert model_id_of("llama3.2:3b") == "llama3-2-3b" and model_id_of("gemma3:1b") == "gemma3-1b"
    assert is_short_name("phi4-mini:3.8b") and not is_short_name("acme/x:Q4_K_M")
