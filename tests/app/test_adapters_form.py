"""The model editor's LoRA adapters row: a JSON list, llama.cpp only, refused per field when wrong."""

from __future__ import annotations

import json

from helpers import definition

from agent.api.llamacpp import Adapter
from app.viewmodels.settings_form import SettingsForm, all_fields


def test_adapters_are_edited_as_a_json_list_and_kept_through_an_edit() -> None:
    form = SettingsForm(definition("alpha"))
    assert form.values["adapters"] == "[]"
    form.set("adapters", json.dumps([{"name": "alpha-poet", "file": "/models/poet.gguf", "scale": 0.5}]))
    result, errors = form.validate()
    assert errors == {} and result is not None
    assert result.adapters == [Adapter(name="alpha-poet", file="/models/poet.gguf", scale=0.5)]
    again = SettingsForm(result)
    again.set("description", "edited")
    kept, _ = again.validate()
    assert kept is not None and kept.adapters == result.adapters


def test_a_bad_adapter_list_is_refused_on_its_row() -> None:
    form = SettingsForm(definition("alpha"))
    form.set("adapters", json.dumps([{"name": "x"}]))
    result, errors = form.validate()
    assert result is None and "required" in errors["adapters"]
    form.set("adapters", "[not json")
    assert "adapters" in form.validate()[1]


def test_only_llamacpp_shows_the_row() -> None:
    assert "adapters" in [s.key for s in all_fields("llamacpp")]
    assert "adapters" not in [s.key for s in all_fields("vllm")] + [s.key for s in all_fields("mlx")]
