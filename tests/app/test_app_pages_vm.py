"""Per-page view-models: settings form, models list, logs, charts, access keys and snippets; those
that read the daemon run the real one (no local agent) with a node, "workstation", whose runtime is
the fake llama-server (it logs each request)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest
from helpers import definition, until
from real_daemon import (
    RealDaemon,
    alpha_and_beta,
    app_client,
    ask,
    chat,
    daemon_with_workstation,
    fresh,
    on_workstation,
    plant_history,
)

from agent.api.llamacpp import LlamaCppSettings
from app.viewmodels.access import AccessState, AccessViewModel
from app.viewmodels.charts import CHARTS, ChartsViewModel
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.logs import LogsViewModel
from app.viewmodels.models_page import ModelsPageViewModel
from app.viewmodels.settings_form import SettingsForm, llamacpp_fields
from daemon.api.client import DaemonClient
from daemon.api.models import DaemonSettings


# --- settings editor ------------------------------------------------------------------------------
def test_every_llamacpp_setting_has_an_editor_row_with_its_flag_unit_and_default() -> None:
    specs = {s.key: s for s in llamacpp_fields()}
    assert set(specs) == {f"settings.{name}" for name in LlamaCppSettings.model_fields} - {"settings.runtime"}
    ctx = specs["settings.ctx_size"]
    assert (ctx.kind, ctx.flag, ctx.unit, ctx.placeholder) == ("int", "--ctx-size", "tokens", "default: from model")
    assert specs["settings.flash_attn"].choices == ("on", "off", "auto")
    assert specs["settings.mlock"].kind == "bool"


def test_bad_values_are_refused_with_pydantic_messages_per_field() -> None:
    form = SettingsForm(definition("alpha"))
    form.set("settings.ctx_size", "-5")
    form.set("settings.threads", "many")
    form.set("served_name", "")
    result, errors = form.validate()
    assert result is None
    assert "greater than or equal to 0" in errors["settings.ctx_size"]
    assert "valid integer" in errors["settings.threads"]
    assert "at least 1 character" in errors["served_name"]


def test_good_values_build_the_definition_and_blank_means_runtime_default() -> None:
    form = SettingsForm(definition("alpha", settings=LlamaCppSettings(ctx_size=4096)))
    assert form.values["settings.ctx_size"] == "4096" and not form.dirty
    form.set("settings.ctx_size", "")
    form.set("settings.parallel", "4")
    form.set("settings.flash_attn", "on")
    form.set("tags", "chat, code")
    form.set("extra_args", "--top-k 40")
    form.set("env", "CUDA_VISIBLE_DEVICES=0")
    result, errors = form.validate()
    assert errors == {} and result is not None and form.dirty
    assert result.settings.ctx_size is None and result.settings.parallel == 4
    assert result.settings.flash_attn == "on" and result.tags == ["chat", "code"]
    assert result.extra_args == ["--top-k", "40"] and result.env == {"CUDA_VISIBLE_DEVICES": "0"}


def test_new_model_id_is_checked_in_words() -> None:
    form = SettingsForm(definition("alpha"), is_new=True)
    form.set("id", "Bad Id")
    assert "lowercase letters" in form.validate()[1]["id"]
    form.set("env", "no equals sign")
    assert "NAME=value" in form.validate()[1]["env"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    with daemon_with_workstation(tmp_path_factory.mktemp("pages"), log_requests=True) as found:
        yield found


@pytest.fixture
async def client(daemon: RealDaemon) -> AsyncIterator[DaemonClient]:
    """The app's client of the module's daemon, reset to alpha and beta ("Beta-7B"), stopped."""
    async with app_client(daemon, *alpha_and_beta(daemon)) as found:
        yield found


# --- models page ----------------------------------------------------------------------------------
async def test_models_page_filters_by_tag_and_keeps_a_selection(client: DaemonClient) -> None:
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    page = ModelsPageViewModel(fleet)
    assert page.state.value.selected_id == "alpha" and page.state.value.tags == ("chat", "code")
    page.set_tag("code")
    assert [m.definition.id for m in page.state.value.models] == ["beta"]
    assert page.state.value.selected_id == "beta"
    page.set_tag("")
    draft = page.new_draft(fleet.snapshot.value.model("beta").definition)  # type: ignore[union-attr]
    assert draft.id == "beta-copy" and draft.served_name == "Beta-7B-copy"
    assert page.state.value.draft is draft and page.state.value.selected is None


# --- logs -----------------------------------------------------------------------------------------
async def test_logs_follow_pause_and_search(client: DaemonClient, daemon: RealDaemon) -> None:
    await client.start_model("alpha", wait=True)
    logs = LogsViewModel(client, flush_s=0.001)
    shown: list[str] = []
    logs.appended.subscribe(shown.extend)
    logs.follow("alpha")
    await until(lambda: any("server is listening on" in line for line in shown), timeout=10)
    assert shown[0].startswith("build: fake llama-server"), "from the log's start (it is short)"
    await until(lambda: "all slots are idle" in shown[-1] or "processing task" in shown[-1], timeout=10)
    seen = len(logs.lines)
    logs.set_paused(True)
    chat(daemon, "alpha")  # the runtime logs the request
    await until(lambda: any("processing task" in line for line in logs.lines[seen:]), timeout=10)
    assert len(shown) == seen, "paused: nothing new is shown"
    logs.set_paused(False)
    assert shown == list(logs.lines) and "processing task" in "\n".join(shown[seen:])
    logs.set_query("LISTENING ON")
    assert logs.text() == next(line for line in logs.lines if "server is listening on" in line)
    logs.stop()


# --- charts ---------------------------------------------------------------------------------------
async def test_charts_turn_history_into_columns_and_follow_the_range(client: DaemonClient,
                                                                    daemon: RealDaemon) -> None:
    fresh(daemon, on_workstation(daemon, "charted"))
    times = plant_history(daemon, "charted", [{"gen_tps": 10.0, "kv_cache_ratio": 0.25},
                                              {"gen_tps": None, "kv_cache_ratio": 0.5}])
    charts = ChartsViewModel(client)
    charts.show("charted")
    await until(lambda: charts.state.value.ts == tuple(times), timeout=10)
    cols = charts.state.value.columns
    assert cols["gen_tps"][0] == 10.0 and math.isnan(cols["gen_tps"][1])
    assert cols["kv_cache_ratio"] == (25.0, 50.0), "KV cache is shown in percent"
    assert charts.state.value.latest("gen_tps") == 10.0
    assert {k for spec in CHARTS for k, _ in spec.series} >= {"gen_tps", "prompt_tps", "requests_running",
                                                             "requests_waiting", "rss_bytes", "gpu_mem_bytes",
                                                             "gpu_util_percent"}
    daemon.call(lambda deps: deps.history.maintain(times[-1] + 120))  # their minute, rolled up
    charts.set_range("24h")
    await until(lambda: charts.state.value.range == "24h" and len(charts.state.value.ts) == 1, timeout=10)
    assert charts.state.value.columns["kv_cache_ratio"] == (37.5,), "the minute's average"
    charts.hide()


# --- access ---------------------------------------------------------------------------------------
async def test_a_new_key_is_returned_once_and_the_list_never_holds_it(client: DaemonClient,
                                                                     daemon: RealDaemon) -> None:
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    access = AccessViewModel(fleet)
    await access.refresh()
    created = await access.create_key("laptop")
    assert created.key.startswith("sk-mirbad-")
    assert [k.name for k in access.state.value.keys] == ["laptop"]
    assert created.key not in repr(access.state.value)
    assert daemon.call(lambda deps: deps.keys.verify(created.key)) == created.info.id
    await access.revoke_key(created.info.id)
    assert access.state.value.keys == () and daemon.call(lambda deps: deps.keys.list()) == []


async def test_lan_access_turns_on_required_keys(client: DaemonClient, daemon: RealDaemon) -> None:
    await client.create_key("editor")  # the daemon refuses LAN access until a key exists
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    access = AccessViewModel(fleet)
    await access.refresh()
    saved = await access.set_lan_access(True)
    settings = ask(daemon, lambda c: c.get_settings())
    assert (settings.lan_access, settings.require_api_keys) == (True, True)
    assert saved.require_api_keys and access.state.value.keys_required
    with pytest.raises(ValueError, match="LAN access off first"):
        await access.set_require_keys(False)
    await access.set_lan_access(False)
    assert access.state.value.settings.lan_access is False and access.state.value.settings.require_api_keys
    settings = ask(daemon, lambda c: c.get_settings())
    assert (settings.lan_access, settings.require_api_keys) == (False, True)
def test_connections_carry_the_real_url_model_and_key_hint() -> None:
    here = AccessState(api_url="http://127.0.0.1:8484/v1", local_url="http://127.0.0.1:8484/v1",
                       models=("gemma3", "qwen"))
    curl, note = here.connection("curl")
    assert "http://127.0.0.1:8484/v1/chat/completions" in curl.text and '"gemma3"' in curl.text
    assert "Authorization" not in curl.text and "needs no key" in note  # keys off: nothing to paste
    keyed = replace(here, settings=DaemonSettings(require_api_keys=True))
    python, note = keyed.connection("openai-python", "qwen")
    assert 'api_key="YOUR_API_KEY"' in python.text and 'model="qwen"' in python.text and "shown once" in note
    python, note = keyed.connection("openai-python", secret="sk-mirbad-new")
    assert 'api_key="sk-mirbad-new"' in python.text and "private" in note
    lan = replace(here, lan_urls=("http://192.168.1.5:8484/v1",))
    assert 'apiBase: "http://192.168.1.5:8484/v1"' in lan.connection("continue", from_lan=True)[0].text
    assert "YOUR_API_KEY" in lan.connection("continue", from_lan=True)[0].text  # the LAN always needs a key
    assert "127.0.0.1" in lan.connection("continue")[0].text


async def test_ready_models_feed_the_snippets(client: DaemonClient) -> None:
    await client.start_model("beta", wait=True)
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    access = AccessViewModel(fleet)
    assert access.state.value.model == "Beta-7B"
    assert access.state.value.models == ("Beta-7B", "alpha")  # ready first, then loaded on request
