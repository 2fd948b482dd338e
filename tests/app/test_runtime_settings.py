"""The settings editor follows the model's runtime (llama.cpp, vLLM, MLX), and models carry runtime badges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
from helpers import definition, settings_of
from pydantic import BaseModel, Field
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QPlainTextEdit
from real_daemon import WORKSTATION

from app.ui.main_window import MainWindow
from app.ui.pages.models import ModelRow
from app.viewmodels.models_page import runtime_badge
from app.viewmodels.settings_form import RUNTIME_SECTIONS, SettingsForm, runtime_fields
from daemon.api.client import DaemonClient
from daemon.api.contracts import LlamaCppSettings, MlxSettings, VllmSettings
from daemon.api.models import ModelDefinition


def vllm_model(model_id: str = "vl", **kw: Any) -> ModelDefinition:
    return definition(model_id, runtime="vllm", model_path=f"/models/{model_id}", image="vllm/vllm-openai:v0.8.5",
                      settings=LlamaCppSettings(ctx_size=2048), **kw)


# --- the form, Qt-free -----------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", ["llamacpp", "vllm", "mlx"])
def test_every_field_of_the_runtimes_settings_model_has_a_row(runtime: str) -> None:
    section, model = RUNTIME_SECTIONS[runtime]
    form = SettingsForm(definition("m", runtime=runtime))
    shown = {s.key for s in form.specs if s.section == section}
    fields = {name for name, info in model.model_fields.items() if not info.exclude}  # not the union's tag
    assert shown == {f"{section}.{name}" for name in fields}, "a field in the model is a row in the form"
    assert {s.section for s in form.specs if s.section} == {section, "preset"}  # and the model's preset
    for spec in form.specs:
        if spec.section == section:
            extra = model.model_fields[spec.name].json_schema_extra
            assert isinstance(extra, dict) and spec.flag == extra["flag"] and spec.unit == str(extra.get("unit") or "")


def test_the_vllm_rows_have_vllms_flags_defaults_and_widget_kinds() -> None:
    specs = {s.key: s for s in runtime_fields("vllm")}
    assert not any(k.startswith("settings.") for k in specs), "no llama.cpp rows for a vLLM model"
    seqs = specs["vllm.max_num_seqs"]
    assert (seqs.kind, seqs.flag, seqs.unit, seqs.placeholder) == ("int", "--max-num-seqs", "sequences", "default: 256")
    assert specs["vllm.max_model_len"].placeholder == "default: from model"
    assert specs["vllm.enable_prefix_caching"].kind == "tribool"
    assert specs["vllm.kv_cache_dtype"].kind == "choice" and "fp8" in specs["vllm.kv_cache_dtype"].choices
    assert specs["vllm.speculative"].kind == "json" and specs["vllm.speculative"].flag == "--speculative-config"
    assert {s.key for s in runtime_fields("mlx")} == {f"mlx.{n}" for n in MlxSettings.model_fields} - {"mlx.runtime"}


class _Nested(BaseModel):
    depth: int = 1


class _LaterVllm(VllmSettings):
    """Fields a later vLLM release might bring, of every kind the editor knows."""

    eager: bool | None = Field(default=None, json_schema_extra={"flag": "--enforce-eager", "runtime_default": False,
                                                                "unit": ""})
    dtype: Literal["auto", "half"] = Field(default="auto", json_schema_extra={"flag": "--dtype",
                                                                              "runtime_default": "auto", "unit": ""})
    swap_space: float | None = Field(default=None, json_schema_extra={"flag": "--swap-space", "runtime_default": 4,
                                                                      "unit": "GiB"})
    nested: _Nested | None = Field(default=None, json_schema_extra={"flag": "--nested", "runtime_default": "off",
                                                                    "unit": ""})


def test_a_field_added_to_a_settings_model_gets_a_row_of_its_kind_without_code_changes() -> None:
    specs = {s.key: s for s in runtime_fields("vllm", _LaterVllm)}
    assert (specs["vllm.eager"].kind, specs["vllm.eager"].flag, specs["vllm.eager"].placeholder) == \
        ("tribool", "--enforce-eager", "default: off")
    assert (specs["vllm.dtype"].kind, specs["vllm.dtype"].choices) == ("choice", ("auto", "half"))
    assert (specs["vllm.swap_space"].kind, specs["vllm.swap_space"].unit) == ("float", "GiB")
    assert specs["vllm.nested"].kind == "json" and specs["vllm.nested"].nested


def test_editing_a_vllm_field_saves_definition_vllm_and_keeps_the_rest() -> None:
    form = SettingsForm(vllm_model(runtime_version="0.8.5", vllm=VllmSettings(max_model_len=8192)))
    assert form.values["vllm.max_model_len"] == "8192" and not form.dirty
    form.set("vllm.max_num_seqs", "32")
    form.set("vllm.max_model_len", "")
    form.set("vllm.enable_prefix_caching", "false")
    form.set("vllm.speculative", '{"method": "ngram", "num_speculative_tokens": 4}')
    result, errors = form.validate()
    assert errors == {} and result is not None
    assert result.vllm.max_num_seqs == 32 and result.vllm.max_model_len is None
    assert result.vllm.enable_prefix_caching is False
    assert result.vllm.speculative is not None and result.vllm.speculative.num_speculative_tokens == 4
    assert result.runtime == "vllm" and result.image == "vllm/vllm-openai:v0.8.5" and result.runtime_version == "0.8.5"
    assert result.settings.ctx_size == 2048, "the llama.cpp settings the editor does not show stay as they were"


def test_bad_vllm_values_are_refused_field_by_field() -> None:
    form = SettingsForm(vllm_model())
    form.set("vllm.max_num_seqs", "0")
    form.set("vllm.speculative", '{"num_speculative_tokens": "many"}')
    result, errors = form.validate()
    assert result is None
    assert "greater than or equal to 1" in errors["vllm.max_num_seqs"]
    assert errors["vllm.speculative"].startswith("num_speculative_tokens: ") and "integer" in errors["vllm.speculative"]
    form.set("vllm.speculative", "{not json")
    assert "not valid JSON" in form.validate()[1]["vllm.speculative"]


def test_switching_the_runtime_shows_that_runtimes_rows() -> None:
    form = SettingsForm(definition("m"), is_new=True)
    assert any(s.key == "settings.ctx_size" for s in form.specs)
    form.set("runtime", "mlx")
    assert any(s.key == "mlx.max_tokens" for s in form.specs) and not any(s.section == "settings" for s in form.specs)
    form.set("mlx.max_tokens", "1024")
    result, errors = form.validate()
    assert errors == {} and result is not None and result.runtime == "mlx" and result.mlx.max_tokens == 1024


def test_the_runtime_badge_says_the_runtime_and_its_pinned_version() -> None:
    assert runtime_badge(definition("a"))[0] == "llama.cpp"
    assert runtime_badge(definition("b", runtime="vllm"))[0] == "vLLM"
    assert runtime_badge(definition("c", runtime="mlx", runtime_version="0.26.1"))[0] == "MLX 0.26.1"
    digest = "vllm/vllm-openai@sha256:" + "ab" * 32
    text, tip = runtime_badge(definition("d", runtime="vllm", runtime_version=digest))
    assert text == "vLLM sha256:abababababab" and digest in tip


# --- the widgets -----------------------------------------------------------------------------------
pytest_gui = pytest.mark.gui


@pytest.fixture
def window(real_daemon: Any, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    """The main window over the real daemon holding alpha, qwen-vl (vLLM 0.8.5) and mlx-one, stopped."""
    real_daemon.hold_models(definition("alpha", tags=["chat"]),
                            vllm_model("qwen-vl", served_name="Qwen-vLLM", runtime_version="0.8.5",
                                       vllm=VllmSettings(max_model_len=8192)),
                            definition("mlx-one", runtime="mlx", model_path="/models/mlx-one"))
    return open_main_window(DaemonClient(*real_daemon, client_name="app"), size=(1280, 800), nodes_loaded=True)


def _saved(real_daemon: Any, model_id: str) -> Any:
    """The daemon's definition of ``model_id`` (None: it has none)."""
    return next((d for d in real_daemon.call(lambda deps: deps.registry.all()) if d.id == model_id), None)


@pytest_gui
def test_a_vllm_models_panel_shows_vllms_fields_with_flags_and_defaults(window: MainWindow, qtbot: Any) -> None:
    editor = settings_of(window, qtbot, "qwen-vl")
    assert "settings.ctx_size" not in editor.editors, "no llama.cpp rows for a vLLM model"
    seqs = editor.editors["vllm.max_num_seqs"]
    assert isinstance(seqs, QLineEdit) and seqs.placeholderText() == "default: 256" and "--max-num-seqs" in seqs.toolTip()
    length = editor.editors["vllm.max_model_len"]
    assert isinstance(length, QLineEdit) and length.text() == "8192"
    assert isinstance(editor.editors["vllm.enable_prefix_caching"], QComboBox)
    assert isinstance(editor.editors["vllm.speculative"], QPlainTextEdit)
    shown = {w.text() for w in editor.findChildren(QLabel) if w.isVisible()}
    assert {"--max-num-seqs", "--max-model-len", "VLLM RUNTIME", "Container image"} <= shown
    assert "--ctx-size" not in shown and "LLAMA.CPP RUNTIME" not in shown
    editor_llama = settings_of(window, qtbot, "alpha")
    assert "settings.ctx_size" in editor_llama.editors and "vllm.max_num_seqs" not in editor_llama.editors


@pytest_gui
def test_editing_a_vllm_field_saves_it_and_a_bad_value_shows_the_error(window: MainWindow, real_daemon: Any,
                                                                      qtbot: Any) -> None:
    editor = settings_of(window, qtbot, "qwen-vl")
    seqs = editor.editors["vllm.max_num_seqs"]
    seqs.setText("0")
    error = editor.errors["vllm.max_num_seqs"]
    assert error.isVisible() and "greater than or equal to 1" in error.text()
    assert not editor.save_button.isEnabled() and "1 value to fix" in editor.summary.text()
    seqs.setText("48")
    assert not error.isVisible() and editor.save_button.isEnabled()
    editor.save_button.click()
    qtbot.waitUntil(lambda: _saved(real_daemon, "qwen-vl").vllm.max_num_seqs == 48)
    saved = _saved(real_daemon, "qwen-vl")
    assert saved.runtime == "vllm" and saved.vllm.max_num_seqs == 48 and saved.vllm.max_model_len == 8192
    assert saved.settings.ctx_size == 2048 and saved.image == "vllm/vllm-openai:v0.8.5"


@pytest_gui
def test_picking_another_runtime_for_a_new_model_rebuilds_the_rows(window: MainWindow, real_daemon: Any,
                                                                   qtbot: Any) -> None:
    window.show_page("models")
    window.models.add_button.click()
    editor = window.models.panel.settings
    assert "settings.ctx_size" in editor.editors
    picker = editor.editors["runtime"]
    assert isinstance(picker, QComboBox)
    picker.setCurrentIndex(picker.findData("vllm"))
    assert "vllm.max_num_seqs" in editor.editors and "settings.ctx_size" not in editor.editors
    editor.editors["id"].setText("gamma")
    editor.editors["vllm.max_num_seqs"].setText("8")
    node = editor.editors["node"]
    node.setCurrentIndex(node.findData(WORKSTATION))  # the machine it runs on: this daemon has no local agent
    editor.save_button.click()
    qtbot.waitUntil(lambda: _saved(real_daemon, "gamma") is not None)
    created = _saved(real_daemon, "gamma")
    assert created.runtime == "vllm" and created.vllm.max_num_seqs == 8


@pytest_gui
def test_the_models_list_and_the_panel_header_carry_runtime_badges(window: MainWindow, qtbot: Any) -> None:
    window.show_page("models")
    page = window.models
    rows = {page.list.item(i).data(Qt.ItemDataRole.UserRole): page.list.itemWidget(page.list.item(i)) for i in range(page.list.count())}
    assert all(isinstance(r, ModelRow) for r in rows.values())
    assert {k: r.runtime_badge.text() for k, r in rows.items()} == \
        {"alpha": "llama.cpp", "qwen-vl": "vLLM 0.8.5", "mlx-one": "MLX"}
    page.select("qwen-vl")
    qtbot.waitUntil(lambda: page.panel.runtime_badge.text() == "vLLM 0.8.5")
    assert page.panel.runtime_badge.isVisible() and "pinned to 0.8.5" in page.panel.runtime_badge.toolTip()
    page.select("mlx-one")
    qtbot.waitUntil(lambda: page.panel.runtime_badge.text() == "MLX")
