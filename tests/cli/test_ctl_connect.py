"""``mirbadllm ctl connect``: a tool's configuration with this daemon's URL, a key and a served model,
the same text the Access page shows; the list of tools, and an unknown tool said plainly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from daemon.api.connect import KEY_PLACEHOLDER, NO_KEY, config_for
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, model, running_daemon


async def _ctl(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(list(argv)), rd.client)


def test_connect_alone_lists_the_tools_and_an_unknown_one_exits_non_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = ["--home", str(tmp_path / "no-daemon-here")]  # neither needs the daemon
    assert ctl.main([*home, "connect"]) == 0
    listed = capsys.readouterr().out
    assert all(tool in listed for tool in ("continue", "cline", "open-webui", "zed", "aider", "langchain"))
    assert ctl.main([*home, "connect", "vscode"]) == 2
    said = capsys.readouterr()
    assert said.out == "" and "no configuration for 'vscode'" in said.err and "continue" in said.err


async def test_connect_prints_the_tools_configuration_with_a_new_key(
        tmp_path: Path, fake_runtime: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        await rd.client.create_model(model("coder", str(model_file)))
        await rd.client.create_model(model("big", str(model_file), start_on_request=False))
        assert await _ctl(rd, "connect", "continue", "--key-name", "laptop") == 0
        out, err = capsys.readouterr()
        [key] = await rd.client.list_keys()
        [entry] = yaml.safe_load(out)["models"]
        assert (entry["apiBase"], entry["model"]) == (rd.v1, "coder")  # the first a request can start
        assert entry["apiKey"].startswith(key.prefix) and key.name == "laptop"
        assert "config.yaml" in err and "laptop" in err and entry["apiKey"] not in err

        assert await _ctl(rd, "connect", "continue", "--key-name", "Laptop") == 0  # taken: its secret is gone
        out, err = capsys.readouterr()
        assert yaml.safe_load(out)["models"][0]["apiKey"] == NO_KEY  # keys are off on this daemon
        assert "exists" in err and len(await rd.client.list_keys()) == 1

        assert await _ctl(rd, "connect", "zed", "--model", "big", "--key", "sk-given") == 0
        out, err = capsys.readouterr()
        assert out == config_for("zed", rd.v1, "sk-given", "big").text  # what the Access page shows
        assert json.loads(out)["language_models"]["openai_compatible"]["MirbadLLM"]["api_url"] == rd.v1
        assert "MIRBADLLM_API_KEY=sk-given" in err


async def test_connect_refuses_an_unknown_model_and_a_closed_lan(
        tmp_path: Path, fake_runtime: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime, require_api_keys=True) as rd:
        await rd.client.create_model(model("coder", str(model_file)))
        assert await _ctl(rd, "connect", "aider", "--model", "gpt-4o") == 1
        err = capsys.readouterr().err
        assert "'gpt-4o'" in err and "coder" in err
        assert await _ctl(rd, "connect", "aider", "--lan") == 1
        assert "not open to other devices" in capsys.readouterr().err
        assert await _ctl(rd, "connect", "AIDER") == 0
        out, err = capsys.readouterr()
        assert f"--openai-api-key {KEY_PLACEHOLDER}" in out and "shown once" in err  # keys required, none given
