"""LM Studio's models through the real daemon and its agent child: the GGUFs of its folders (its own,
under the home, and one the user picked) listed with quant, projector and the model already running
each; an import registers the chosen files where they lie, and importing one again names the model
that has it instead of adding it twice; a path outside those folders is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.sources import LmStudioImportQuery
from tests.daemon.harness import running_daemon
from tests.daemon.test_sources_api import transfer_end
from tests.fakes.gguf_files import write_gguf


def lmstudio_tree(root: Path) -> dict[str, Path]:
    """LM Studio's layout: publisher/repo/file.gguf, a projector beside one model."""
    qwen = root / "lmstudio-community" / "Qwen3-4B-GGUF"
    files = {"qwen": write_gguf(qwen / "Qwen3-4B-Q4_K_M.gguf"),
             "mmproj": write_gguf(qwen / "mmproj-Qwen3-4B-F16.gguf", arch="clip", layers=1),
             "gemma": write_gguf(root / "bartowski" / "gemma-3-1b-GGUF" / "gemma-3-1b-Q8_0.gguf")}
    return files


async def test_lm_studio_files_are_listed_imported_in_place_and_never_twice(
        tmp_path: Path, fake_runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "user"
    monkeypatch.setenv("HOME", str(user))  # the agent child looks in ~/.lmstudio/models
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    own = lmstudio_tree(user / ".lmstudio" / "models")
    picked = write_gguf(tmp_path / "elsewhere" / "unsloth" / "phi-4-GGUF" / "phi-4-Q5_K_M.gguf")
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        listed = await d.client.lmstudio_models()
        assert [(m.model, m.quant, m.projector_path, m.registered_as) for m in listed] == [
            ("bartowski/gemma-3-1b-GGUF/gemma-3-1b-Q8_0.gguf", "Q8_0", None, None),
            ("lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf", "Q4_K_M", str(own["mmproj"]), None)]
        with_folder = await d.client.lmstudio_models(folder=str(tmp_path / "elsewhere"))
        assert [m.path for m in with_folder][-1] == str(picked)

        since = (await d.client.status()).last_event_id
        started = await d.client.import_lmstudio(LmStudioImportQuery(paths=[str(own["qwen"]), str(picked)],
                                                                     folder=str(tmp_path / "elsewhere")))
        done, _states = await transfer_end(d.client, started.id, since)
        assert done.registered == ["qwen3-4b-q4-k-m", "phi-4-q5-k-m"], done.error or done.register_error
        qwen = (await d.client.get_model("qwen3-4b-q4-k-m")).definition
        assert qwen.model_path == str(own["qwen"]) and qwen.extra_args == ["--mmproj", str(own["mmproj"])]
        assert qwen.tags == ["lmstudio"] and own["qwen"].exists()  # registered where it lies: nothing moved

        listed = await d.client.lmstudio_models()
        assert {m.model.split("/")[-1]: m.registered_as for m in listed} == {
            "gemma-3-1b-Q8_0.gguf": None, "Qwen3-4B-Q4_K_M.gguf": "qwen3-4b-q4-k-m"}

        since = (await d.client.status()).last_event_id
        again = await d.client.import_lmstudio(LmStudioImportQuery(paths=[str(own["qwen"]), str(own["gemma"])]))
        done, _states = await transfer_end(d.client, again.id, since)
        assert done.registered == ["gemma-3-1b-q8-0"] and done.existing == ["qwen3-4b-q4-k-m"], done
        assert len([m for m in await d.client.list_models() if m.definition.model_path == str(own["qwen"])]) == 1

        for folder, status in (("models/relative", 422), (str(tmp_path / "missing"), 404)):
            with pytest.raises(DaemonError) as bad_folder:
                await d.client.lmstudio_models(folder=folder)
            assert bad_folder.value.status == status, bad_folder.value.message
        for path in (str(own["mmproj"]), str(tmp_path / "elsewhere" / "x.gguf")):
            with pytest.raises(DaemonError) as refused:
                await d.client.import_lmstudio(LmStudioImportQuery(paths=[path]))
            assert refused.value.status == 404 and "not a model in LM Studio's folders" in refused.value.message
