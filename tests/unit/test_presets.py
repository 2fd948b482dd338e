"""A model's preset fills what a request does not set, in the names its runtime reads."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from daemon.api.models import ModelDefinition, Preset
from daemon.models.presets import apply_preset

CHAT = "/v1/chat/completions"


def model(runtime: str = "llamacpp", **preset: Any) -> ModelDefinition:
    extra = {"base_url": "https://api.example/v1", "provider_model": "m"} if runtime == "external" else {}
    return ModelDefinition.model_validate({"id": "m", "served_name": "m", "model_path": "/m.gguf",
                                           "runtime": runtime, "preset": preset, **extra})


def test_a_chat_without_a_system_message_gets_the_presets_and_its_sampling() -> None:
    payload: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.1}
    assert apply_preset(model(system_prompt="Be brief.", temperature=0.9, top_k=20, repeat_penalty=1.1), CHAT,
                        payload)
    assert payload["messages"][0] == {"role": "system", "content": "Be brief."}
    assert payload["temperature"] == 0.1  # the request's own value wins
    assert (payload["top_k"], payload["repeat_penalty"]) == (20, 1.1)


def test_the_request_wins_and_a_system_message_is_kept() -> None:
    messages = [{"role": "developer", "content": "Mine."}, {"role": "user", "content": "hi"}]
    payload: dict[str, Any] = {"messages": list(messages), "max_completion_tokens": 5, "top_p": None}
    assert not apply_preset(model(system_prompt="Be brief.", max_tokens=100, top_p=0.5), CHAT, payload)
    assert payload == {"messages": messages, "max_completion_tokens": 5, "top_p": None}


def test_each_runtime_gets_the_names_it_reads_and_only_those() -> None:
    for runtime, penalty in (("llamacpp", "repeat_penalty"), ("vllm", "repetition_penalty")):
        payload: dict[str, Any] = {"prompt": "x"}
        apply_preset(model(runtime, repeat_penalty=1.2, min_p=0.05), "/v1/completions", payload)
        assert payload == {"prompt": "x", penalty: 1.2, "min_p": 0.05}
    payload = {"messages": []}
    apply_preset(model("external", temperature=0.3, top_k=40, repeat_penalty=1.2), CHAT, payload)
    assert payload == {"messages": [], "temperature": 0.3}  # an OpenAI server refuses top_k


def test_embeddings_and_an_empty_preset_are_left_alone() -> None:
    payload: dict[str, Any] = {"input": "x"}
    assert not apply_preset(model(temperature=0.3), "/v1/embeddings", payload) and payload == {"input": "x"}
    assert not apply_preset(model(), CHAT, {"messages": []})


@pytest.mark.parametrize(("field", "value"), [("temperature", 3), ("top_p", 0), ("top_k", -1), ("min_p", 2),
                                              ("max_tokens", 0), ("repeat_penalty", 0)])
def test_a_value_out_of_range_is_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        Preset.model_validate({field: value})
