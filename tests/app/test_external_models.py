"""External endpoints in the app: added from the wizard (base URL, provider model, the path of an API
key file, never the key), edited in the model editor without llama.cpp's rows, and every model's
fallbacks edited there; nodes offer only the agent runtimes. The wizard and the editor save to the real
daemon (no local agent), which reads each API key file it is given."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import add_model_dialog, definition, settings_of
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLineEdit
from real_daemon import RealDaemon, ask

from app.context import AppContext, Message
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.nodes import available_runtimes, runtime_badges
from app.viewmodels.settings_form import SettingsForm, all_fields, groups
from daemon.api.client import DaemonClient
from daemon.api.contracts import RUNTIME_LABELS, RUNTIMES, LlamaCppSettings
from daemon.api.models import ModelDefinition
from daemon.api.nodes import NodeState, NodeView, RuntimeOffer


def endpoint(model_id: str = "gpt-mini", **kw: Any) -> ModelDefinition:
    return ModelDefinition(id=model_id, served_name=kw.pop("served_name", model_id), runtime="external",
                           base_url="https://api.example.com/v1", provider_model="gpt-4o-mini",
                           api_key_file=kw.pop("api_key_file", "/etc/mirbadllm/openai.key"), **kw)


@pytest.fixture
def key_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An API key file the daemon can read (it refuses one it cannot)."""
    path = tmp_path_factory.mktemp("keys") / "openai.key"
    path.write_text("sk-live-123\n")
    return str(path)


@pytest.fixture
def client(real_daemon: RealDaemon, key_file: str) -> Iterator[DaemonClient]:
    """The app's client of the module's daemon, holding alpha and the endpoint gpt-mini."""
    real_daemon.hold_models(definition("alpha", tags=["chat"]), endpoint(api_key_file=key_file))
    yield DaemonClient(*real_daemon, client_name="app")


def saved(daemon: RealDaemon, model_id: str) -> ModelDefinition:
    """The model's definition as the daemon saved it."""
    return ask(daemon, lambda c: c.get_model(model_id)).definition


def test_nodes_offer_only_the_agent_runtimes() -> None:
    assert RUNTIMES == ("llamacpp", "vllm", "mlx") and "external" not in RUNTIMES
    assert RUNTIME_LABELS["external"] == "external endpoint"
    node = NodeView(id="a" * 64, name="box", state=NodeState.ONLINE, runtimes=[
        RuntimeOffer(runtime=r, available=True, version="1") for r in ("llamacpp", "vllm", "mlx")])
    assert [b.runtime for b in runtime_badges(node)] == ["llamacpp", "vllm", "mlx"]
    assert "external" not in available_runtimes(node)


# --- the wizard, Qt-free ------------------------------------------------------------------------------
async def test_an_external_model_is_saved_with_its_endpoint_and_no_node_settings(
        client: DaemonClient, real_daemon: RealDaemon, key_file: str) -> None:
    vm = AddModelViewModel(client)
    await vm.load_nodes()
    vm.set_source("external")
    s = vm.state.value
    assert s.runtime_choices == () and not s.can_check and not s.can_plan and not s.can_add
    assert "base URL" in s.external_problem
    vm.set_field("base_url", "api.example.com/v1")
    assert "http:// or https://" in vm.state.value.external_problem and not vm.state.value.can_add
    vm.set_field("base_url", " https://api.example.com/v1 ")
    assert "model name" in vm.state.value.external_problem
    vm.set_field("provider_model", "gpt-4o-mini")
    vm.set_field("api_key_file", "sk-live-123")  # a key pasted where the path goes is refused
    assert "absolute path" in vm.state.value.external_problem and not vm.state.value.can_add
    vm.set_field("api_key_file", key_file)
    assert vm.state.value.external_problem == "" and vm.state.value.can_add
    await vm.add()
    assert vm.state.value.error is None and vm.state.value.done_ids == ("gpt-4o-mini",)
    model = saved(real_daemon, "gpt-4o-mini")
    assert (model.id, model.served_name, model.runtime) == ("gpt-4o-mini", "gpt-4o-mini", "external")
    assert (model.base_url, model.provider_model, model.api_key_file) == (
        "https://api.example.com/v1", "gpt-4o-mini", key_file)
    assert model.node == "local" and model.model_path == "(external)", "placed on no node"
    assert model.settings == LlamaCppSettings() and model.image is None and model.extra_args == []
    assert model.sources is None
    assert vm.state.value.fit is None and vm.state.value.plan is None, "no file to check, nothing to plan"
    vm.close()
    await client.close()


async def test_an_external_model_may_send_no_key(client: DaemonClient, real_daemon: RealDaemon) -> None:
    vm = AddModelViewModel(client)
    vm.set_source("external")
    vm.set_field("base_url", "http://10.0.0.5:8000/v1")
    vm.set_field("provider_model", "Qwen/Qwen3-8B")
    vm.set_field("model_id", "lab-qwen")
    await vm.add()
    model = saved(real_daemon, "lab-qwen")
    assert (model.id, model.provider_model, model.api_key_file) == ("lab-qwen", "Qwen/Qwen3-8B", None)
    vm.close()
    await client.close()


async def test_a_key_file_the_daemon_cannot_read_is_refused_in_its_words(client: DaemonClient,
                                                                        real_daemon: RealDaemon) -> None:
    vm = AddModelViewModel(client)
    vm.set_source("external")
    vm.set_field("base_url", "https://api.example.com/v1")
    vm.set_field("provider_model", "gpt-4o-mini")
    vm.set_field("api_key_file", "/nowhere/openai.key")
    await vm.add()
    assert "not a readable file on the daemon's machine" in (vm.state.value.error or "")
    assert [v.definition.id for v in ask(real_daemon, lambda c: c.list_models())] == ["alpha", "gpt-mini"]
    vm.close()
    await client.close()


# --- the editor's form, Qt-free ---------------------------------------------------------------------
def test_an_external_models_form_has_its_endpoint_rows_and_no_runtime_settings() -> None:
    keys = [s.key for s in all_fields("external")]
    assert {"base_url", "provider_model", "api_key_file", "fallbacks"} <= set(keys)
    assert not [k for k in keys if "." in k and not k.startswith("preset.")], "no llama.cpp, vLLM or MLX settings"
    assert {k for k in keys if k.startswith("preset.")} == {  # what an OpenAI server takes, and a system prompt
        "preset.system_prompt", "preset.temperature", "preset.top_p", "preset.max_tokens"}
    assert not {"node", "model_path", "extra_args", "env", "adapters", "image"} & set(keys)
    assert groups("external") == ("Model", "Endpoint", "Preset")
    runtime = next(s for s in all_fields("external") if s.key == "runtime")
    assert runtime.choices == ("external",)
    agent_runtime = next(s for s in all_fields("llamacpp") if s.key == "runtime")
    assert agent_runtime.choices == ("llamacpp", "vllm", "mlx")
    assert {"base_url", "provider_model", "api_key_file"}.isdisjoint(s.key for s in all_fields("llamacpp"))

    form = SettingsForm(endpoint())
    assert form.runtime == "external"
    assert (form.values["base_url"], form.values["api_key_file"]) == ("https://api.example.com/v1",
                                                                      "/etc/mirbadllm/openai.key")
    form.set("provider_model", "gpt-4.1-mini")
    form.set("fallbacks", "alpha, Beta-7B")
    saved, errors = form.validate()
    assert errors == {} and saved is not None
    assert (saved.runtime, saved.provider_model, saved.fallbacks) == ("external", "gpt-4.1-mini", ["alpha", "Beta-7B"])
    assert saved.api_key_file == "/etc/mirbadllm/openai.key" and saved.settings == LlamaCppSettings()


def test_a_bad_endpoint_is_refused_on_its_row() -> None:
    form = SettingsForm(endpoint())
    form.set("base_url", "ftp://files.example.com")
    form.set("provider_model", "")
    form.set("api_key_file", "openai.key")
    saved, errors = form.validate()
    assert saved is None and set(errors) == {"base_url", "provider_model", "api_key_file"}
    assert "http:// or https://" in errors["base_url"] and "absolute path" in errors["api_key_file"]
    form.set("base_url", "https://user:secret@api.example.com/v1")
    assert "no credentials" in form.validate()[1]["base_url"]
    form.set("runtime", "llamacpp")  # an endpoint is not turned into a model a node runs
    assert form.runtime == "external"


def test_fallbacks_are_edited_for_a_model_a_node_runs() -> None:
    form = SettingsForm(definition("alpha", fallbacks=["beta"]))
    assert form.values["fallbacks"] == "beta"
    form.set("fallbacks", "gpt-mini, beta")
    saved, errors = form.validate()
    assert errors == {} and saved is not None and saved.fallbacks == ["gpt-mini", "beta"]
    assert saved.base_url is None and saved.runtime == "llamacpp"
    form.set("fallbacks", "")
    cleared, _ = form.validate()
    assert cleared is not None and cleared.fallbacks == []


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(client: DaemonClient, open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext]:
    win = open_main_window(client, size=(1280, 800))
    return win, win.ctx


@pytest.mark.gui
def test_the_wizard_adds_an_external_endpoint(window: tuple[MainWindow, AppContext], real_daemon: RealDaemon,
                                              key_file: str, qtbot: Any) -> None:
    win, ctx = window
    with add_model_dialog(ctx, win) as dialog:
        dialog.source_buttons.button(4).click()
        assert dialog.pages.currentIndex() == 4 and dialog.base_url.isVisible()
        assert not dialog.node.isVisible() and not dialog.runtime.isVisible() and not dialog.ctx_size.isVisible()
        assert not dialog.fit_button.isVisible() and not dialog.plan_button.isVisible()
        assert not dialog.add_button.isEnabled()
        qtbot.keyClicks(dialog.base_url, "https://api.example.com/v1")
        qtbot.keyClicks(dialog.provider_model, "gpt-4o")
        qtbot.keyClicks(dialog.api_key_file, "key.txt")
        assert not dialog.add_button.isEnabled() and "absolute path" in dialog.external_note.text()
        dialog.api_key_file.clear()
        qtbot.keyClicks(dialog.api_key_file, key_file)
        assert dialog.add_button.isEnabled()
        qtbot.keyClicks(dialog.model_id, "gpt-4o")
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.model("gpt-4o") is not None, timeout=10_000)
        model = saved(real_daemon, "gpt-4o")
        assert (model.id, model.runtime, model.base_url, model.provider_model, model.api_key_file) == (
            "gpt-4o", "external", "https://api.example.com/v1", "gpt-4o", key_file)


@pytest.mark.gui
def test_the_editor_shows_an_endpoint_and_saves_its_fallbacks(window: tuple[MainWindow, AppContext],
                                                              real_daemon: RealDaemon, key_file: str,
                                                              qtbot: Any) -> None:
    win, _ctx = window
    editor = settings_of(win, qtbot, "gpt-mini")
    assert "settings.ctx_size" not in editor.editors and "node" not in editor.editors
    assert "model_path" not in editor.editors and "extra_args" not in editor.editors
    url, key = editor.editors["base_url"], editor.editors["api_key_file"]
    assert isinstance(url, QLineEdit) and url.text() == "https://api.example.com/v1"
    assert isinstance(key, QLineEdit) and key.text() == key_file
    runtime = editor.editors["runtime"]
    assert isinstance(runtime, QComboBox) and runtime.count() == 1 and not runtime.isEnabled()
    url.setText("api.example.com")
    assert editor.errors["base_url"].isVisible() and not editor.save_button.isEnabled()
    url.setText("https://api.example.com/v2")
    fallbacks = editor.editors["fallbacks"]
    assert isinstance(fallbacks, QLineEdit)
    fallbacks.setText("alpha")
    assert editor.save_button.isEnabled()
    editor.save_button.click()
    qtbot.waitUntil(lambda: saved(real_daemon, "gpt-mini").fallbacks == ["alpha"], timeout=10_000)
    model = saved(real_daemon, "gpt-mini")
    assert (model.runtime, model.base_url, model.fallbacks, model.api_key_file) == (
        "external", "https://api.example.com/v2", ["alpha"], key_file)

    qtbot.waitUntil(lambda: (m := win.ctx.fleet.snapshot.value.model("gpt-mini")) is not None
                    and m.definition.fallbacks == ["alpha"] and not editor.form.dirty)  # the save is in
    llama = settings_of(win, qtbot, "alpha")
    assert "settings.ctx_size" in llama.editors and "base_url" not in llama.editors
    told: list[Message] = []
    win.ctx.messages.subscribe(told.append)
    llama.editors["fallbacks"].setText("gpt-mini")  # which falls back to alpha: the daemon refuses a cycle
    llama.save_button.click()
    qtbot.waitUntil(lambda: bool(told), timeout=10_000)
    assert told[-1].error and told[-1].text == "fallbacks: a cycle (alpha -> gpt-mini -> alpha)"
    assert saved(real_daemon, "alpha").fallbacks == []
    ask(real_daemon, lambda c: c.create_model(endpoint("gpt-big", api_key_file=key_file)))
    llama.editors["fallbacks"].setText("gpt-big")
    llama.save_button.click()
    qtbot.waitUntil(lambda: saved(real_daemon, "alpha").fallbacks == ["gpt-big"], timeout=10_000)
