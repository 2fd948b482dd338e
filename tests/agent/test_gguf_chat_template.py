"""Whether a GGUF carries a chat template: read from its header, and reported by the agent's fit.

A base model (no ``tokenizer.chat_template``) only continues text; the app's Playground uses this
fact to offer text completion instead of a chat that loops.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.api.sources import FitRequest
from agent.gguf_facts import summarize
from agent.gguf_reader import read_header
from tests.agent._sources_support import sources_agent
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"


def test_a_file_with_a_template_says_so(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "instruct.gguf", extra={"tokenizer.chat_template": TEMPLATE})
    assert summarize(read_header(model)).has_chat_template is True


def test_a_file_without_the_key_is_a_base_model(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "base.gguf")
    assert summarize(read_header(model)).has_chat_template is False


def test_an_empty_template_or_only_a_named_one_is_no_default_template(tmp_path: Path) -> None:
    empty = write_gguf(tmp_path / "empty.gguf", extra={"tokenizer.chat_template": "  "})
    named = write_gguf(tmp_path / "named.gguf", extra={"tokenizer.chat_template.tool_use": TEMPLATE})
    assert summarize(read_header(empty)).has_chat_template is False
    assert summarize(read_header(named)).has_chat_template is False


def test_the_real_demo_model_has_no_template(gemma_gguf: Path) -> None:
    assert summarize(read_header(gemma_gguf)).has_chat_template is False


async def test_the_agent_reports_the_fact_over_the_wire(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    base = write_gguf(tmp_path / "models" / "base.gguf")
    instruct = write_gguf(tmp_path / "models" / "instruct.gguf", extra={"tokenizer.chat_template": TEMPLATE})
    memory = FakeMemoryProbe(total=16 * GiB, available=12 * GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, memory_probe=memory) as agent:
        assert (await agent.client.fit(FitRequest(model_path=str(base)))).summary.has_chat_template is False
        assert (await agent.client.fit(FitRequest(model_path=str(instruct)))).summary.has_chat_template is True
