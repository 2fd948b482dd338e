"""A runtime's settings are one value: a member of ``RuntimeSettings`` told apart by its ``runtime`` tag,
reached through ``runtime_settings`` (agent.api.runtimes.settings_of), never by picking a field."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from agent.api.llamacpp import LlamaCppSettings
from agent.api.mlx import MlxSettings
from agent.api.models import LaunchSpec
from agent.api.runtimes import (
    PROFILES,
    ExternalSettings,
    RuntimeSettings,
    settings_type,
    settings_update,
)
from agent.api.vllm import VllmSettings
from daemon.api.models import ModelDefinition

UNION: TypeAdapter[RuntimeSettings] = TypeAdapter(RuntimeSettings)


def definition(runtime: str) -> ModelDefinition:
    return ModelDefinition.model_validate({
        "id": "m", "served_name": "m", "runtime": runtime, "model_path": "/models/m",
        "settings": {"ctx_size": 2048}, "vllm": {"max_num_seqs": 8}, "mlx": {"max_tokens": 64},
        **({"base_url": "https://api.example/v1", "provider_model": "gpt-x"} if runtime == "external" else {})})


@pytest.mark.parametrize(("runtime", "member", "figure"), [
    ("llamacpp", LlamaCppSettings, ("ctx_size", 2048)), ("vllm", VllmSettings, ("max_num_seqs", 8)),
    ("mlx", MlxSettings, ("max_tokens", 64)), ("external", ExternalSettings, ("provider_model", "gpt-x"))])
def test_a_definition_gives_the_settings_of_its_own_runtime(runtime: str, member: type, figure: tuple) -> None:
    own = definition(runtime).runtime_settings
    assert type(own) is member and own.runtime == runtime and settings_type(runtime) is member
    assert getattr(own, figure[0]) == figure[1]


def test_a_launch_spec_gives_the_settings_of_its_own_runtime() -> None:
    spec = LaunchSpec(instance_id="m", runtime="vllm", model_path="org/m", served_name="m",
                      vllm=VllmSettings(tensor_parallel_size=2))
    assert spec.runtime_settings == VllmSettings(tensor_parallel_size=2)
    assert LaunchSpec(instance_id="m", model_path="/m.gguf", served_name="m").runtime_settings == LlamaCppSettings()


def test_the_union_tells_its_members_apart_by_the_tag() -> None:
    assert UNION.validate_python({"runtime": "vllm", "max_num_seqs": 4}) == VllmSettings(max_num_seqs=4)
    assert UNION.validate_python({"runtime": "mlx", "max_tokens": 9}) == MlxSettings(max_tokens=9)
    with pytest.raises(ValidationError):  # a vLLM setting is no llama.cpp setting
        UNION.validate_python({"runtime": "llamacpp", "max_num_seqs": 4})
    with pytest.raises(ValidationError):
        LlamaCppSettings.model_validate({"runtime": "vllm"})
    assert {p.id for p in PROFILES.values()} == {settings_type(p.id)().runtime for p in PROFILES.values()}


def test_the_tag_is_never_stored_nor_sent() -> None:
    """An older agent refuses a settings key it does not know; models.json keeps its shape."""
    dumped = definition("vllm").model_dump(mode="json")
    assert "runtime" not in dumped["settings"] and "runtime" not in dumped["vllm"] and "runtime" not in dumped["mlx"]
    spec = LaunchSpec(instance_id="m", runtime="mlx", model_path="/m", served_name="m").model_dump(mode="json")
    assert all("runtime" not in spec[field] for field in ("settings", "vllm", "mlx"))
    assert ModelDefinition.model_validate(dumped) == definition("vllm")


def test_settings_go_back_where_their_runtime_keeps_them() -> None:
    vllm = definition("vllm")
    changed = vllm.model_copy(update=settings_update(VllmSettings(max_num_seqs=2)))
    assert changed.runtime_settings == VllmSettings(max_num_seqs=2)
    assert changed.settings == vllm.settings and changed.mlx == vllm.mlx  # the others stay as they were
