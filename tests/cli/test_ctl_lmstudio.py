"""``mirbadllm ctl models import lmstudio``: a person lists LM Studio's models, imports one by name,
imports it again and is told it is already added, then imports the rest with ``--all``."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from tests.cli.test_ctl_sources import ctl_run
from tests.daemon.harness import running_daemon
from tests.daemon.test_lmstudio_import import lmstudio_tree
from tests.fakes.gguf_files import write_gguf


async def test_list_import_and_import_again_says_already_added(
        tmp_path: Path, fake_runtime: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    user = tmp_path / "user"
    monkeypatch.setenv("HOME", str(user))  # the agent child looks in ~/.lmstudio/models
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    own = lmstudio_tree(user / ".lmstudio" / "models")
    write_gguf(tmp_path / "picked" / "unsloth" / "phi-4-GGUF" / "phi-4-Q5_K_M.gguf")
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await ctl_run(rd, "models", "import", "lmstudio") == 0
        assert capsys.readouterr().out.splitlines() == [
            "bartowski/gemma-3-1b-GGUF/gemma-3-1b-Q8_0.gguf  Q8_0  0.0 MiB  not added",
            "lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf  Q4_K_M  0.0 MiB  +projector  not added"]

        assert await ctl_run(rd, "models", "import", "lmstudio", "Qwen3-4B-Q4_K_M.gguf") == 0
        assert "added model 'qwen3-4b-q4-k-m'" in capsys.readouterr().out
        qwen = (await rd.client.get_model("qwen3-4b-q4-k-m")).definition
        assert qwen.model_path == str(own["qwen"]) and qwen.extra_args == ["--mmproj", str(own["mmproj"])]

        assert await ctl_run(rd, "models", "import", "lmstudio", "qwen3") == 0
        out = capsys.readouterr().out
        assert "already added as model 'qwen3-4b-q4-k-m'" in out and "added model" not in out

        assert await ctl_run(rd, "models", "import", "lmstudio", "--folder", str(tmp_path / "picked"), "--all") == 0
        out = capsys.readouterr().out
        assert "added model 'gemma-3-1b-q8-0'" in out and "added model 'phi-4-q5-k-m'" in out
        assert "already added as model 'qwen3-4b-q4-k-m'" in out
        assert await ctl_run(rd, "models", "import", "lmstudio") == 0
        assert "Qwen3-4B-Q4_K_M.gguf  Q4_K_M  0.0 MiB  +projector  added as 'qwen3-4b-q4-k-m'" in capsys.readouterr().out
        assert sorted(m.definition.id for m in await rd.client.list_models()) == [
            "gemma-3-1b-q8-0", "phi-4-q5-k-m", "qwen3-4b-q4-k-m"]

        with pytest.raises(DaemonError) as unknown:
            await ctl_run(rd, "models", "import", "lmstudio", "llama")
        assert "no LM Studio model 'llama'" in unknown.value.message
        with pytest.raises(DaemonError) as several:
            await ctl_run(rd, "models", "import", "lmstudio", "GGUF")
        assert "names several models" in several.value.message
