"""Ollama's request bodies as OpenAI ones: options, ``format``, images, tool calls; pure functions.

A body Ollama would refuse, or one whose meaning would be lost on the way, is a ``BadRequest``
(answered 400 in Ollama's shape) that names the field and what it must be.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

_LOGGER = logging.getLogger(__name__)

# Ollama's option -> the OpenAI field llama-server reads (it takes top_k, min_p, repeat_penalty too).
OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
           "typical_p": "typical_p", "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
           "frequency_penalty": "frequency_penalty", "seed": "seed", "stop": "stop", "num_predict": "max_tokens"}
INTEGER_OPTIONS = frozenset({"top_k", "seed", "num_predict"})
# The first bytes of an image, for its data URL's media type (Ollama's clients send bare base64).
IMAGE_MAGIC = ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"),
               (b"BM", "image/bmp"))


class BadRequest(Exception):
    """A body that cannot be sent on: the message says which field and what it must be."""


def model_name(body: dict[str, Any]) -> str:
    """The ``model`` a body names (older clients send ``name``)."""
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("model is required: send 'model' with the name of a model (GET /api/tags lists them)")
    return name


def sampling(body: dict[str, Any]) -> dict[str, Any]:
    """``options`` and ``format`` as OpenAI fields. Options that tune loading (num_ctx, num_gpu, ...)
    are the model's settings in MirbadLLM, not a request's, and are left out; so is ``keep_alive``."""
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise BadRequest("options must be an object, e.g. {\"temperature\": 0.7}")
    out: dict[str, Any] = {}
    for name, value in options.items():
        field = OPTIONS.get(name)
        if field is None or value is None:
            continue
        if name == "stop":
            out[field] = _stop(value)
        elif name in INTEGER_OPTIONS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadRequest(f"options.{name} must be an integer, not {value!r}")
            if name != "num_predict" or value > 0:  # num_predict -1 / -2: until the context ends
                out[field] = value
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"options.{name} must be a number, not {value!r}")
        else:
            out[field] = value
    response_format = _format(body.get("format"))
    if response_format is not None:
        out["response_format"] = response_format
    return out


def _stop(value: Any) -> list[str]:
    words = [value] if isinstance(value, str) else value
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise BadRequest("options.stop must be a string or a list of strings")
    return words


def _format(value: Any) -> dict[str, Any] | None:
    """``"json"``: any JSON object; a JSON schema: an answer that follows it."""
    if value in (None, ""):
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": value, "strict": True}}
    raise BadRequest(f"format must be \"json\" or a JSON schema (an object), not {value!r}")


def image_part(image: Any, where: str) -> dict[str, Any]:
    """An image as an OpenAI content part: a data URL of the base64 Ollama sends."""
    if not isinstance(image, str) or not image:
        raise BadRequest(f"{where} must be a base64 string")
    if image.startswith("data:"):
        return {"type": "image_url", "image_url": {"url": image}}
    try:
        head = base64.b64decode(image[:32], validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where} is not base64: send the image's bytes base64-encoded") from None
    media = next((kind for magic, kind in IMAGE_MAGIC if head.startswith(magic)), None)
    if media is None:
        media = "image/webp" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else "image/jpeg"
    return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{image}"}}


def _content(text: Any, images: Any, where: str) -> Any:
    if text is not None and not isinstance(text, str):
        raise BadRequest(f"{where}.content must be a string")
    if not images:
        return text or ""
    if not isinstance(images, list):
        raise BadRequest(f"{where}.images must be a list of base64 strings")
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return parts + [image_part(image, f"{where}.images[{i}]") for i, image in enumerate(images)]


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's: images become image parts, a tool call's arguments a JSON
    text, and a tool's answer names the call it answers (by the tool's name, else in order)."""
    if not isinstance(messages, list):
        raise BadRequest("messages must be a list of {\"role\", \"content\"} objects")
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, tool name) of the last assistant's calls
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"{where} must be an object with a 'role' (system, user, assistant or tool)")
        role = message["role"]
        entry: dict[str, Any] = {"role": role, "content": _content(message.get("content"), message.get("images"), where)}
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            entry["tool_calls"] = _tool_calls(calls, i, where)
            pending = [(c["id"], c["function"]["name"]) for c in entry["tool_calls"]]
        if role == "tool":
            name = message.get("tool_name") or message.get("name")
            match = next((p for p in pending if p[1] == name), pending[0] if pending else None)
            if match is not None:
                pending.remove(match)
                entry["tool_call_id"] = match[0]
        out.append(entry)
    return out


def _tool_calls(calls: Any, index: int, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list")
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest(f"{where}.tool_calls[{j}] must be {{\"function\": {{\"name\", \"arguments\"}}}}")
        arguments = function.get("arguments") or {}
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        out.append({"id": f"call_{index}_{j}", "type": "function",
                    "function": {"name": function["name"], "arguments": text}})
    return out


def chat_request(body: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
    """``/api/chat``'s body as ``/v1/chat/completions``'."""
    payload: dict[str, Any] = {"model": model, "messages": chat_messages(body.get("messages")), **sampling(body)}
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise BadRequest("tools must be a list of {\"type\": \"function\", \"function\": {...}}")
        payload["tools"] = tools
    return _streamed(payload, stream)


def generate_request(body: dict[str, Any], model: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """``/api/generate``'s body as the /v1 path and body it becomes: the prompt as a chat turn (the
    model's template applies, as in Ollama), or with ``raw`` as a plain completion."""
    prompt, system = body.get("prompt") or "", body.get("system")
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    if system is not None and not isinstance(system, str):
        raise BadRequest("system must be a string")
    if body.get("suffix"):
        raise BadRequest("suffix (fill in the middle) is not supported here: send the prompt alone")
    if body.get("raw") is True:
        if body.get("images"):
            raise BadRequest("images need the model's template: leave raw out")
        return "/v1/completions", _streamed({"model": model, "prompt": prompt, **sampling(body)}, stream)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": _content(prompt, body.get("images"), "request")})
    return "/v1/chat/completions", _streamed({"model": model, "messages": messages, **sampling(body)}, stream)


def embed_request(body: dict[str, Any], model: str, legacy: bool) -> dict[str, Any]:
    """``/api/embed``'s body (``input``: a text or a list) or ``/api/embeddings``' (``prompt``) as
    ``/v1/embeddings``'."""
    given = body.get("prompt", "") if legacy else body.get("input", "")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise BadRequest("prompt must be a string" if legacy else "input must be a string or a list of strings")
    payload: dict[str, Any] = {"model": model, "input": given}
    dimensions = body.get("dimensions")
    if dimensions is not None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise BadRequest("dimensions must be a positive integer")
        payload["dimensions"] = dimensions
    return payload


def _streamed(payload: dict[str, Any], stream: bool) -> dict[str, Any]:
    payload["stream"] = stream
    if stream:  # the counters of Ollama's last line come from the usage chunk
        payload["stream_options"] = {"include_usage": True}
    return payload


def is_streamed(body: dict[str, Any]) -> bool:
    """Ollama streams unless told ``"stream": false``."""
    stream = body.get("stream", True)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("stream must be true or false")
    return stream is not False
