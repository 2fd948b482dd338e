"""A model whose answer was cut for silence shows as Stalled (one far slower than its history, Slow): on the Overview's attention list, in
`ctl status`, and its two times are settings the editor shows and checks."""

from __future__ import annotations

from app.ui.pages.overview import attention
from app.viewmodels.fleet import FleetSnapshot
from app.viewmodels.settings_form import SettingsForm
from daemon.api.models import ModelDefinition, ModelState, ModelStatus, ModelView
from mirbadllm.ctl import _fmt_model

WHY = "10:04:05: the runtime of 'm' went silent for 60 s in the middle of its answer (after 812 bytes)"


def view(model_id: str, stalled: str | None, slow: str | None = None) -> ModelView:
    definition = ModelDefinition(id=model_id, served_name=model_id, model_path=f"/m/{model_id}.gguf")
    return ModelView(definition=definition, status=ModelStatus(id=model_id, served_name=model_id,
                                                               state=ModelState.READY, stalled=stalled, slow=slow))


def test_a_slow_model_needs_attention_and_ctl_says_slow() -> None:
    why = "answers at 4.0 tokens/s, 0.20x its usual 20.0 (the last 3 answers)"
    items = attention(FleetSnapshot(models=(view("m", None, why),)))
    assert [(v.definition.id, text) for v, text in items] == [("m", f"Slow — {why}")]
    line = _fmt_model(view("m", None, why).status)
    assert line.split()[1] == "slow" and "0.20x its usual" in line


def test_a_stalled_model_needs_attention_and_ctl_says_stalled() -> None:
    items = attention(FleetSnapshot(models=(view("m", WHY), view("fine", None))))
    assert [(v.definition.id, why) for v, why in items] == [("m", f"Stalled — {WHY}")]
    line = _fmt_model(view("m", WHY).status)
    assert line.split()[1] == "stalled" and "went silent for 60 s" in line
    assert _fmt_model(view("fine", None).status).split()[1] == "ready"


def test_the_editor_has_the_stall_times_and_refuses_a_cut_shorter_than_the_heartbeat() -> None:
    form = SettingsForm(ModelDefinition(id="m", served_name="m", model_path="/m/m.gguf"))
    assert (form.values["stall_timeout_s"], form.values["heartbeat_s"]) == ("60.0", "10.0")
    form.values.update(stall_timeout_s="5", heartbeat_s="10")
    saved, problems = form.validate()
    assert saved is None and any("longer than heartbeat_s" in why for why in problems.values())
    form.values.update(stall_timeout_s="120")
    saved, problems = form.validate()
    assert problems == {} and saved is not None and saved.stall_timeout_s == 120.0
