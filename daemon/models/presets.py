"""A model's preset applied to a /v1 request: what the request does not set, the model's preset does.

A chat with no system (or developer) message gets the preset's system prompt first; a chat or a
completion gets each sampling value it does not set, under the name the model's runtime reads
(``RuntimeProfile.sampling``: llama.cpp's ``repeat_penalty`` is vLLM's ``repetition_penalty``; an
external OpenAI server gets only the fields OpenAI knows). A value the request sets always wins,
``null`` included. Other paths (embeddings, tokenize) are left alone.
"""

from __future__ import annotations

from typing import Any

from agent.api.runtimes import profile
from daemon.api.models import ModelDefinition

CHAT_PATHS = ("/v1/chat/completions",)
SAMPLED_PATHS = ("/v1/chat/completions", "/v1/completions")


def apply_preset(definition: ModelDefinition, path: str, payload: dict[str, Any]) -> bool:
    """Fill ``payload`` (a parsed request body) from the model's preset; True if it changed."""
    preset = definition.preset
    if path not in SAMPLED_PATHS or preset.empty:
        return False
    changed = False
    messages = payload.get("messages")
    if preset.system_prompt and path in CHAT_PATHS and isinstance(messages, list) and not any(
            isinstance(m, dict) and m.get("role") in ("system", "developer") for m in messages):
        payload["messages"] = [{"role": "system", "content": preset.system_prompt}, *messages]
        changed = True
    for field, sent_as in profile(definition.runtime).sampling:
        value = getattr(preset, field)
        if value is not None and sent_as not in payload and not (field == "max_tokens" and (
                "max_completion_tokens" in payload or "n_predict" in payload)):
            payload[sent_as] = value
            changed = True
    return changed
