"""LoRA adapters read on the model's node when the definition is saved: a file that is no LoRA for the
base model's architecture is refused at once (422, with the reason), not only at the next start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agent.api.sources import lora_problem
from agent.gguf_facts import adapter_problem, summarize
from agent.gguf_reader import read_header
from daemon.api.client import DaemonError
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import write_gguf

LORA = {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": 16.0}

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the tests that share its daemon


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def refusing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningDaemon]:
    """One daemon for the saves that are refused: each test asserts it saved nothing, so none can
    leave anything for the next."""
    home = tmp_path_factory.mktemp("lora-refusals")
    async with running_daemon(home / "home", write_fake_runtime(home / "bin", tokens=2)) as d:
        yield d


def _write(path: Path, content: Any) -> Path:
    if isinstance(content, bytes):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return path
    return write_gguf(path, arch=content[0], layers=0, extra=content[1])


def test_the_summary_carries_the_facts_that_tell_a_lora_and_the_reasons_are_the_agents(tmp_path: Path) -> None:
    lora = read_header(str(write_gguf(tmp_path / "l.gguf", arch="qwen2", layers=0, extra=LORA)))
    plain = read_header(str(write_gguf(tmp_path / "m.gguf", arch="llama")))
    summary, base = summarize(lora), summarize(plain)
    assert summary.kind is not None and base.kind is not None
    assert (summary.kind.general_type, summary.kind.adapter_type, summary.architecture) == ("adapter", "lora", "qwen2")
    assert (base.kind.general_type, base.kind.adapter_type) == (None, None)
    for header, facts in ((lora, summary), (plain, base)):
        assert facts.kind is not None
        said = lora_problem(facts.kind.general_type, facts.kind.adapter_type, facts.architecture, "llama")
        assert said == adapter_problem(header, "llama") and said is not None
    assert lora_problem("adapter", "lora", "qwen2", "qwen2") is None


@pytest.mark.parametrize(("content", "reason"), [
    (("qwen2", LORA), "is an adapter for architecture 'qwen2', not for the model's 'llama'"),
    (("llama", {}), "is not an adapter (general.type is missing, not 'adapter')"),
    (("llama", {**LORA, "adapter.type": "control"}), "is not a LoRA adapter (adapter.type is 'control', not 'lora')"),
    (b"not a gguf file at all", "is not a usable GGUF file"),
    (None, "cannot read"),
])
@IN_MODULE_LOOP
async def test_an_adapter_that_is_no_lora_for_the_model_is_refused_on_save_with_the_reason(
        tmp_path: Path, refusing: RunningDaemon, content: Any, reason: str) -> None:
    folder = tmp_path / "models"
    base = write_gguf(folder / "base.gguf", arch="llama")
    adapter = folder / "adapter.gguf"
    if content is not None:
        _write(adapter, content)
    d = refusing
    with pytest.raises(DaemonError) as refused:
        await d.client.create_model(model("base", str(base), adapters=[{"name": "tuned", "file": str(adapter)}]))
    assert (refused.value.status, refused.value.code) == (422, "invalid_model")
    assert refused.value.message.startswith(f"adapters: adapter 'tuned' ({adapter})")
    assert reason in refused.value.message
    assert await d.client.list_models() == []


async def test_a_lora_for_the_model_is_saved_and_an_update_to_a_wrong_one_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    base = write_gguf(folder / "base.gguf", arch="llama")
    good = _write(folder / "good.gguf", ("llama", LORA))
    wrong = _write(folder / "wrong.gguf", ("gemma3", LORA))
    runtime = write_fake_runtime(tmp_path / "bin", tokens=2)
    async with running_daemon(tmp_path / "home", runtime) as d:
        saved = await d.client.create_model(model("base", str(base), adapters=[{"name": "good", "file": str(good)}]))
        assert [a.name for a in saved.definition.adapters] == ["good"]

        with pytest.raises(DaemonError) as refused:
            await d.client.update_model(model("base", str(base), adapters=[{"name": "good", "file": str(good)},
                                                                           {"name": "bad", "file": str(wrong)}]))
        assert refused.value.status == 422
        assert "adapter 'bad'" in refused.value.message and "architecture 'gemma3'" in refused.value.message
        kept = (await d.client.get_model("base")).definition
        assert [a.file for a in kept.adapters] == [str(good)]


@IN_MODULE_LOOP
async def test_a_base_file_the_node_cannot_read_is_refused_before_its_adapters_are_judged(
        tmp_path: Path, refusing: RunningDaemon) -> None:
    """The model file first: one the node cannot read is refused naming it (nothing saved), whatever its adapters."""
    folder = tmp_path / "models"
    wrong = _write(folder / "wrong.gguf", ("qwen2", LORA))
    d = refusing
    with pytest.raises(DaemonError) as refused:
        await d.client.create_model(model("base", str(folder / "not-yet-here.gguf"),
                                          adapters=[{"name": "q", "file": str(wrong)}]))
    assert (refused.value.status, refused.value.code) == (422, "invalid_model")
    assert refused.value.message.startswith("model_path: ") and "not-yet-here.gguf" in refused.value.message
    assert await d.client.list_models() == []