"""A model the daemon unloaded to make room for another shows on the Overview until it starts again;
the settings editor has a row for pinning a model and for its class."""

from __future__ import annotations

from app.ui.pages.overview import attention
from app.viewmodels.fleet import FleetSnapshot
from app.viewmodels.settings_form import SettingsForm
from daemon.api.models import ModelDefinition, ModelState, ModelStatus, ModelView

WHY = "unloaded to make room for 'big' (6.00 GiB needed; it was idle, class standard, and held 4.00 GiB)"


def view(model_id: str, state: ModelState, evicted: str | None) -> ModelView:
    definition = ModelDefinition(id=model_id, served_name=model_id, model_path=f"/m/{model_id}.gguf")
    return ModelView(definition=definition,
                     status=ModelStatus(id=model_id, served_name=model_id, state=state, evicted=evicted))


def test_an_evicted_model_needs_attention_until_it_runs_again() -> None:
    snapshot = FleetSnapshot(models=(view("gone", ModelState.STOPPED, WHY), view("fine", ModelState.READY, None),
                                     view("back", ModelState.STARTING, WHY)))
    items = attention(snapshot)
    assert [(v.definition.id, why) for v, why in items] == [("gone", "U" + WHY[1:])]


def test_the_editor_shows_pinned_and_class_and_saves_them() -> None:
    form = SettingsForm(ModelDefinition(id="m", served_name="m", model_path="/m/m.gguf"))
    specs = {spec.key: spec for spec in form.specs}
    assert specs["pinned"].kind == "bool" and specs["model_class"].kind == "choice"
    assert specs["model_class"].values == ("critical", "standard", "opportunistic")
    assert (form.values["pinned"], form.values["model_class"]) == (False, "standard")
    form.values.update(pinned=True, model_class="critical")
    saved, problems = form.validate()
    assert problems == {} and saved is not None and (saved.pinned, saved.model_class) == (True, "critical")
    form.values.update(model_class="sometimes")
    saved, problems = form.validate()
    assert saved is None and "model_class" in problems
