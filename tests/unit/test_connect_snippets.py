"""Connect your apps (``daemon.api.connect``): each tool's configuration parses in its own format and
holds the URL, the key and the model a person chose, even a served name that needs quoting."""

from __future__ import annotations

import ast
import json
import shlex

import pytest
import yaml

from daemon.api.connect import (
    KEY_PLACEHOLDER,
    NO_KEY,
    TOOLS,
    UnknownTool,
    config_for,
    connect_url,
    key_note,
    key_text,
    served_models,
)
from daemon.api.models import (
    DaemonInfo,
    ModelDefinition,
    ModelState,
    ModelStatus,
    ModelView,
)

URL = "http://192.168.1.5:8484/v1"
KEY = "sk-mirbad-0123456789abcdef"
MODEL = "qwen2.5-coder:7b"
ODD = "it's \"7b\" #1"  # a served name with a quote, double quotes and a YAML comment sign


def _python_call_keywords(text: str, func: str) -> dict[str, object]:
    """The literal keyword arguments of the first call to ``func`` in ``text``."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == func:
            return {k.arg: ast.literal_eval(k.value) for k in node.keywords
                    if k.arg and isinstance(k.value, ast.Constant)}
    raise AssertionError(f"no call to {func}")


def _shell_commands(text: str) -> list[list[str]]:
    """Each command of a shell snippet, split as the shell would (comments and line joins dropped)."""
    joined = text.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if shlex.split(line, comments=True)]


@pytest.mark.parametrize("model", [MODEL, ODD])
def test_continue_is_a_yaml_models_entry(model: str) -> None:
    snippet = config_for("continue", URL, KEY, model)
    [entry] = yaml.safe_load(snippet.text)["models"]
    assert entry["provider"] == "openai"
    assert (entry["apiBase"], entry["apiKey"], entry["model"]) == (URL, KEY, model)
    assert "config.yaml" in snippet.where_it_goes


@pytest.mark.parametrize("model", [MODEL, ODD])
def test_zed_is_valid_json_in_the_openai_compatible_shape(model: str) -> None:
    snippet = config_for("zed", URL, KEY, model)
    provider = json.loads(snippet.text)["language_models"]["openai_compatible"]["MirbadLLM"]
    assert provider["api_url"] == URL
    assert [m["name"] for m in provider["available_models"]] == [model]
    assert provider["available_models"][0]["max_tokens"] > 0
    # Zed keeps keys out of settings.json: the key is in where it goes, with the variable Zed reads
    assert KEY not in snippet.text and f"MIRBADLLM_API_KEY={KEY}" in snippet.where_it_goes


@pytest.mark.parametrize("model", [MODEL, ODD])
def test_the_openai_python_client_and_langchain_are_python(model: str) -> None:
    client = _python_call_keywords(config_for("openai-python", URL, KEY, model).text, "OpenAI")
    assert client == {"base_url": URL, "api_key": KEY}
    create = _python_call_keywords(config_for("openai-python", URL, KEY, model).text, "create")
    assert create["model"] == model
    chat = _python_call_keywords(config_for("langchain", URL, KEY, model).text, "ChatOpenAI")
    assert chat == {"base_url": URL, "api_key": KEY, "model": model}


@pytest.mark.parametrize("model", [MODEL, ODD])
def test_aider_takes_the_flags_or_the_environment(model: str) -> None:
    commands = _shell_commands(config_for("aider", URL, KEY, model).text)
    flags, exports, plain = commands[0], commands[1:3], commands[3]
    assert flags[0] == "aider"
    given = dict(zip(flags[1::2], flags[2::2], strict=True))
    assert given == {"--model": f"openai/{model}", "--openai-api-base": URL, "--openai-api-key": KEY}
    assert exports == [["export", f"OPENAI_API_BASE={URL}"], ["export", f"OPENAI_API_KEY={KEY}"]]
    assert plain == ["aider", "--model", f"openai/{model}"]


def test_open_webui_sets_its_environment_with_pip_and_in_docker() -> None:
    snippet = config_for("open-webui", URL, KEY, MODEL)
    pip, docker = _shell_commands(snippet.text)
    assert pip == [f"OPENAI_API_BASE_URL={URL}", f"OPENAI_API_KEY={KEY}", "open-webui", "serve"]
    assert docker[:3] == ["docker", "run", "-d"] and docker[-1] == "ghcr.io/open-webui/open-webui:main"
    env = [docker[i + 1] for i, arg in enumerate(docker) if arg == "-e"]
    assert env == [f"OPENAI_API_BASE_URL={URL}", f"OPENAI_API_KEY={KEY}"]
    assert "-p" in docker and MODEL in snippet.where_it_goes  # a LAN address is reached from a bridged network


def test_open_webui_in_docker_shares_the_network_to_reach_loopback() -> None:
    """Inside a container 127.0.0.1 is the container itself: the daemon is reached on the host's network."""
    _pip, docker = _shell_commands(config_for("open-webui", "http://127.0.0.1:8484/v1", KEY, MODEL).text)
    assert "--network=host" in docker and "-p" not in docker


def test_cline_lists_the_fields_of_its_settings() -> None:
    lines = config_for("cline", URL, KEY, MODEL).text.splitlines()
    fields = dict(line.split(": ", 1) for line in lines)
    assert fields == {"API Provider": "OpenAI Compatible", "Base URL": URL, "API Key": KEY, "Model ID": MODEL}


def test_curl_and_the_javascript_client_hold_the_url_key_and_model() -> None:
    [curl] = _shell_commands(config_for("curl", URL, KEY, ODD).text)
    assert curl[1] == f"{URL}/chat/completions" and f"Authorization: Bearer {KEY}" in curl
    assert json.loads(curl[curl.index("-d") + 1])["model"] == ODD
    assert "Authorization" not in config_for("curl", URL, NO_KEY, MODEL).text  # keys off: no header
    js = config_for("openai-js", URL, KEY, MODEL).text
    assert f'baseURL: "{URL}"' in js and f'apiKey: "{KEY}"' in js and f'model: "{MODEL}"' in js


def test_every_tool_has_a_title_where_it_goes_and_the_url() -> None:
    for tool in TOOLS:
        snippet = config_for(tool, URL + "/", KEY, MODEL)  # a trailing slash is not doubled
        assert snippet.title and snippet.where_it_goes and URL in snippet.text and URL + "//" not in snippet.text


def test_an_unknown_tool_names_the_tools_there_are() -> None:
    with pytest.raises(UnknownTool) as caught:
        config_for("vim", URL, KEY, MODEL)
    assert "'vim'" in str(caught.value) and "continue" in str(caught.value) and "langchain" in str(caught.value)


def test_the_key_is_the_secret_or_says_what_to_do() -> None:
    assert key_text("sk-x", keys_required=True) == "sk-x"
    assert key_text(None, keys_required=True) == KEY_PLACEHOLDER
    assert key_text(None, keys_required=False) == NO_KEY
    assert "shown once" in key_note(KEY_PLACEHOLDER) and "private" in key_note("sk-x")
    assert KEY_PLACEHOLDER in config_for("continue", URL, "", MODEL).text  # no key given: the placeholder


def _info(host: str, lan: list[str]) -> DaemonInfo:
    return DaemonInfo(version="1", host=host, port=8484, api_url=lan[0] if lan else f"http://{host}:8484/v1",
                      lan_urls=lan, keys_required=bool(lan), started_at=0.0, home="/h")


def test_the_url_is_loopback_here_and_the_lan_url_from_another_device() -> None:
    open_ = _info("0.0.0.0", [URL, "http://10.0.0.2:8484/v1"])
    assert connect_url(open_, from_lan=False) == "http://127.0.0.1:8484/v1"
    assert connect_url(open_, from_lan=True) == URL
    closed = _info("127.0.0.1", [])
    assert connect_url(closed, from_lan=False) == "http://127.0.0.1:8484/v1"
    with pytest.raises(ValueError, match="not open to other devices"):
        connect_url(closed, from_lan=True)


def _view(model_id: str, state: ModelState, **kw: object) -> ModelView:
    definition = ModelDefinition(id=model_id, served_name=model_id.title(), model_path="/m.gguf", **kw)
    return ModelView(definition=definition, status=ModelStatus(id=model_id, served_name=model_id.title(),
                                                               state=state))


def test_the_first_model_is_one_a_request_reaches_soonest() -> None:
    views = [_view("pinned", ModelState.STOPPED, start_on_request=False),
             _view("lazy", ModelState.STOPPED),
             _view("warm", ModelState.READY)]
    assert served_models(views) == ["Warm", "Lazy", "Pinned"]
    assert served_models([]) == []
