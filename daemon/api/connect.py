"""Ready configurations for the tools people point at ``/v1``: Continue, Cline, Open WebUI, Zed,
aider, the OpenAI clients, LangChain and curl.

One place for every template: the Access page ("Connect your apps") and ``mirbadllm ctl connect``
both call ``config_for(tool, url, key, model)``, so they show the same text. Each is a pure function
of the URL, the key text and the served name; values are quoted for their format (JSON strings for
JSON, YAML, Python and JavaScript, ``shlex.quote`` for shell) so any served name stays valid.
A secret is only ever put in the returned text, never logged.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from daemon.api.models import DaemonInfo, ModelState, ModelView

_LOGGER = logging.getLogger(__name__)

KEY_PLACEHOLDER = "YOUR_API_KEY"
NO_KEY = "not-needed"  # keys are off: clients still want some text, the daemon ignores it
MODEL_PLACEHOLDER = "MODEL"
ZED_PROVIDER = "MirbadLLM"  # Zed reads its key from MIRBADLLM_API_KEY (the provider id in upper snake case)
WILDCARDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class Snippet:
    title: str
    language: str  # shell, python, javascript, yaml, json, text
    text: str
    where_it_goes: str = ""


@dataclass(frozen=True)
class Piece:
    """A template's output; ``config_for`` adds the tool's title."""

    language: str
    text: str
    where_it_goes: str


@dataclass(frozen=True)
class Tool:
    title: str
    about: str
    build: Callable[[str, str, str], Piece]  # (url, key, model)


class UnknownTool(ValueError):
    """A tool ``config_for`` has no template for; the message lists the ones it has."""


def _q(value: str) -> str:
    """A double-quoted string literal, valid as JSON, YAML, Python and JavaScript."""
    return json.dumps(value)


def _sh(value: str) -> str:
    return shlex.quote(value)


def _curl(url: str, key: str, model: str) -> Piece:
    body = json.dumps({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}]})
    auth = "" if key == NO_KEY else f" \\\n  -H {_sh(f'Authorization: Bearer {key}')}"
    return Piece("shell",
                   f"curl {_sh(url + '/chat/completions')} \\\n  -H 'Content-Type: application/json'{auth} \\\n"
                   f"  -d {_sh(body)}\n",
                   "A terminal: one chat completion, to check the endpoint answers.")


def _openai_python(url: str, key: str, model: str) -> Piece:
    return Piece("python",
                   "from openai import OpenAI\n\n"
                   f"client = OpenAI(base_url={_q(url)}, api_key={_q(key)})\n"
                   "reply = client.chat.completions.create(\n"
                   f"    model={_q(model)},\n"
                   '    messages=[{"role": "user", "content": "Hello!"}],\n'
                   "    max_tokens=64,\n"
                   ")\nprint(reply.choices[0].message.content)\n",
                   "A Python file, after `pip install openai`.")


def _openai_js(url: str, key: str, model: str) -> Piece:
    return Piece("javascript",
                   'import OpenAI from "openai";\n\n'
                   f"const client = new OpenAI({{ baseURL: {_q(url)}, apiKey: {_q(key)} }});\n"
                   "const reply = await client.chat.completions.create({\n"
                   f"  model: {_q(model)},\n"
                   '  messages: [{ role: "user", content: "Hello!" }],\n'
                   "  max_tokens: 64,\n"
                   "});\nconsole.log(reply.choices[0].message.content);\n",
                   "An ES module (.mjs, or TypeScript), after `npm install openai`.")


def _langchain(url: str, key: str, model: str) -> Piece:
    return Piece("python",
                   "from langchain_openai import ChatOpenAI\n\n"
                   f"llm = ChatOpenAI(base_url={_q(url)}, api_key={_q(key)}, model={_q(model)})\n"
                   'print(llm.invoke("Hello!").content)\n',
                   "A Python file, after `pip install langchain-openai`.")


def _continue(url: str, key: str, model: str) -> Piece:
    return Piece("yaml",
                   "models:\n"
                   f"  - name: {_q(model + ' (MirbadLLM)')}\n"
                   "    provider: openai\n"
                   f"    model: {_q(model)}\n"
                   f"    apiBase: {_q(url)}\n"
                   f"    apiKey: {_q(key)}\n"
                   "    roles: [chat, edit, apply]\n",
                   "Continue's ~/.continue/config.yaml (on Windows %USERPROFILE%\\.continue\\config.yaml): add "
                   "the entry to its models: list. A new file also needs name:, version: and schema: v1 at the top.")


def _cline(url: str, key: str, model: str) -> Piece:
    return Piece("text",
                   "API Provider: OpenAI Compatible\n"
                   f"Base URL: {url}\n"
                   f"API Key: {key}\n"
                   f"Model ID: {model}\n",
                   "Cline is set up in its own panel: open Cline's settings (the gear), pick the API provider "
                   "\u201cOpenAI Compatible\u201d and fill in each field as above.")


def _docker_network(url: str) -> str:
    """How the container reaches ``url``: inside it a loopback address is the container's own, so it
    shares the host's network; a LAN address is reached from the usual bridged network."""
    return "--network=host" if urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1") else "-p 3000:8080"


def _open_webui(url: str, key: str, model: str) -> Piece:
    network = _docker_network(url)
    text = ("# Installed with pip:\n"
            f"OPENAI_API_BASE_URL={_sh(url)} OPENAI_API_KEY={_sh(key)} open-webui serve\n\n"
            "# Or in Docker:\n"
            f"docker run -d {network} \\\n"
            f"  -e OPENAI_API_BASE_URL={_sh(url)} \\\n"
            f"  -e OPENAI_API_KEY={_sh(key)} \\\n"
            "  -v open-webui:/app/backend/data --name open-webui --restart always \\\n"
            "  ghcr.io/open-webui/open-webui:main\n")
    at = "http://localhost:8080" if network == "--network=host" else "http://localhost:3000"
    return Piece("shell", text,
                   f"A terminal, the first time Open WebUI starts (later: Admin Settings \u2192 Connections "
                   f"\u2192 OpenAI API, same URL and key). Then open {at} and pick {model} in the model list. "
                   "Docker Desktop (macOS, Windows): use -p 3000:8080 and host.docker.internal in place of "
                   "127.0.0.1.")


def _zed(url: str, key: str, model: str) -> Piece:
    settings = {"language_models": {"openai_compatible": {ZED_PROVIDER: {
        "api_url": url,
        "available_models": [{"name": model, "display_name": f"{model} (MirbadLLM)", "max_tokens": 8192,
                              "capabilities": {"tools": True, "images": False, "parallel_tool_calls": False,
                                               "prompt_cache_key": False}}],
    }}}}
    env = f"{ZED_PROVIDER.upper()}_API_KEY"
    return Piece("json", json.dumps(settings, indent=2) + "\n",
                   "Zed's settings.json (zed: open settings): merge language_models into it; set max_tokens to "
                   f"the model's context size. Zed keeps keys out of settings.json: enter {key} in the Agent "
                   f"panel's settings under LLM Providers \u2192 {ZED_PROVIDER}, or start Zed with {env}={key}.")


def _aider(url: str, key: str, model: str) -> Piece:
    name = _sh(f"openai/{model}")
    return Piece("shell",
                   f"aider --model {name} --openai-api-base {_sh(url)} --openai-api-key {_sh(key)}\n\n"
                   "# or from the environment (a shell profile, say):\n"
                   f"export OPENAI_API_BASE={_sh(url)}\n"
                   f"export OPENAI_API_KEY={_sh(key)}\n"
                   f"aider --model {name}\n",
                   "A terminal in your project's folder (aider is `pip install aider-install && aider-install`).")


#: tool id -> its template, in the order the page and ``ctl connect`` list them.
TOOLS: dict[str, Tool] = {
    "continue": Tool("Continue", "the VS Code and JetBrains assistant", _continue),
    "cline": Tool("Cline", "the VS Code coding agent", _cline),
    "open-webui": Tool("Open WebUI", "a chat page in the browser", _open_webui),
    "zed": Tool("Zed", "the editor's Agent panel", _zed),
    "aider": Tool("aider", "pair programming in the terminal", _aider),
    "openai-python": Tool("OpenAI Python", "the openai package", _openai_python),
    "openai-js": Tool("OpenAI JavaScript", "the openai npm package", _openai_js),
    "langchain": Tool("LangChain", "ChatOpenAI from langchain-openai", _langchain),
    "curl": Tool("curl", "one request from a terminal", _curl),
}


def config_for(tool: str, url: str, key: str, model: str) -> Snippet:
    """``tool``'s configuration for the OpenAI base ``url`` (ending in /v1), the ``key`` text and
    the served name ``model``. Raises ``UnknownTool`` naming the tools there are."""
    entry = TOOLS.get(tool.strip().lower())
    if entry is None:
        raise UnknownTool(f"no configuration for '{tool}'; the tools: {', '.join(TOOLS)}")
    piece = entry.build(url.rstrip("/"), key or KEY_PLACEHOLDER, model or MODEL_PLACEHOLDER)
    return Snippet(entry.title, piece.language, piece.text, piece.where_it_goes)


def key_text(secret: str | None, keys_required: bool) -> str:
    """What goes where a key goes: the secret when there is one, else a placeholder (keys required)
    or text the daemon ignores (keys off)."""
    return secret or (KEY_PLACEHOLDER if keys_required else NO_KEY)


def key_note(key: str) -> str:
    """What the person should know about the key in a configuration."""
    if key == KEY_PLACEHOLDER:
        return (f"Replace {KEY_PLACEHOLDER} with one of your keys. A key's secret is shown once, when it is "
                "created (Access page \u2192 Create key, or `mirbadllm ctl keys create NAME`).")
    if key == NO_KEY:
        return "This machine needs no key yet: the text in its place is ignored, and clients want one."
    return "Filled in with a key's secret: keep this text private."


def connect_url(info: DaemonInfo, from_lan: bool) -> str:
    """The /v1 URL a tool uses: on this machine the loopback address (the daemon listens on every
    address when open to the LAN), from another device its first LAN URL. Raises ``ValueError``
    when another device cannot reach /v1."""
    if from_lan:
        if not info.lan_urls:
            raise ValueError("/v1 is not open to other devices: turn on LAN access on the Access page first.")
        return info.lan_urls[0]
    if info.host in WILDCARDS:
        return f"http://127.0.0.1:{info.port}/v1"
    url = info.api_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def served_models(views: Iterable[ModelView]) -> list[str]:
    """The names a client may send as ``model``, the ones a request reaches soonest first: ready,
    then loaded on request, then those only a start makes ready. Adapters follow their base model."""
    def rank(view: ModelView) -> int:
        if view.status.state == ModelState.READY:
            return 0
        return 1 if view.definition.start_on_request else 2

    names: list[str] = []
    for view in sorted(views, key=rank):  # sorted is stable: the daemon's order within a rank
        for name in (view.definition.served_name, *(a.name for a in view.definition.adapters)):
            if name not in names:
                names.append(name)
    return names
