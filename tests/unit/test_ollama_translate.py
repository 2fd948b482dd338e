"""Ollama's bodies as OpenAI's and OpenAI's answers as Ollama's (``daemon.ollama``): what a tool that
speaks only Ollama sends must mean the same on /v1, and what comes back must read as Ollama's."""

from __future__ import annotations

import base64
import json

import pytest

from daemon.ollama.answers import Answer, UpstreamError
from daemon.ollama.facts import parameter_size
from daemon.ollama.requests import (
    BadRequest,
    chat_request,
    embed_request,
    generate_request,
    sampling,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def test_options_and_format_become_openai_fields() -> None:
    body = {"options": {"temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1,
                        "num_predict": 128, "stop": "\n\n", "seed": 7, "num_ctx": 8192, "num_gpu": 99},
            "format": "json", "keep_alive": "5m"}
    assert sampling(body) == {"temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1,
                              "max_tokens": 128, "stop": ["\n\n"], "seed": 7, "response_format": {"type": "json_object"}}
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    assert sampling({"format": schema})["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": True}}
    assert sampling({"options": {"num_predict": -1}}) == {}  # until the context ends: no cap
    for bad, words in (({"options": {"top_k": 1.5}}, "options.top_k must be an integer"),
                       ({"options": {"stop": [1]}}, "options.stop"), ({"options": "hot"}, "options must be"),
                       ({"format": "yaml"}, "format must be")):
        with pytest.raises(BadRequest, match=words):
            sampling(bad)


def test_chat_messages_carry_images_and_tool_calls() -> None:
    body = {"messages": [
        {"role": "user", "content": "what is this?", "images": [PNG]},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "-3 C", "tool_name": "weather"}],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]}
    payload = chat_request(body, "tiny", stream=True)
    user, assistant, tool = payload["messages"]
    assert user["content"] == [{"type": "text", "text": "what is this?"},
                               {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
    call = assistant["tool_calls"][0]
    assert call["function"] == {"name": "weather", "arguments": json.dumps({"city": "Oslo"})}
    assert tool == {"role": "tool", "content": "-3 C", "tool_call_id": call["id"]}
    assert payload["tools"] == body["tools"] and payload["stream_options"] == {"include_usage": True}


def test_generate_is_a_chat_turn_unless_raw() -> None:
    path, payload = generate_request({"prompt": "Why?", "system": "Be brief."}, "tiny", stream=False)
    assert path == "/v1/chat/completions" and payload["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    path, payload = generate_request({"prompt": "Once upon", "raw": True}, "tiny", stream=False)
    assert (path, payload["prompt"], payload["stream"]) == ("/v1/completions", "Once upon", False)
    with pytest.raises(BadRequest, match="suffix"):
        generate_request({"prompt": "def f(", "suffix": "return"}, "tiny", stream=False)
    assert embed_request({"input": ["a", "b"], "dimensions": 4}, "e", legacy=False) == {
        "model": "e", "input": ["a", "b"], "dimensions": 4}


def test_a_stream_becomes_lines_with_tool_calls_whole_and_counters_last() -> None:
    answer = Answer("tiny", chat=True)
    assert answer.chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}) == []
    line = answer.chunk({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})[0]
    assert (line["message"], line["done"]) == ({"role": "assistant", "content": "Hi"}, False)
    for piece in ({"name": "weather", "arguments": ""}, {"arguments": '{"city": '}, {"arguments": '"Oslo"}'}):
        answer.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": piece}]}}]})
    answer.chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                  "usage": {"prompt_tokens": 12, "completion_tokens": 5},
                  "timings": {"prompt_ms": 20.0, "predicted_ms": 50.0}})
    calls, done = answer.last()
    assert calls["message"]["tool_calls"] == [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]
    assert (done["done"], done["done_reason"], done["prompt_eval_count"], done["eval_count"]) == (True, "stop", 12, 5)
    assert (done["prompt_eval_duration"], done["eval_duration"]) == (20_000_000, 50_000_000)
    with pytest.raises(UpstreamError, match="model_not_ready|is stopped"):
        answer.chunk({"error": {"message": "The model 'tiny' is stopped", "code": "model_not_ready"}})


def test_a_whole_answer_and_parameter_sizes() -> None:
    whole = Answer("tiny", chat=False).whole({"choices": [{"index": 0, "finish_reason": "length", "text": "Once"}],
                                              "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
    assert (whole["response"], whole["done_reason"], whole["eval_count"]) == ("Once", "length", 1)
    assert [parameter_size(n) for n in (None, 268_098_176, 3_212_749_824, 8_000_000_000, 4_000)] == [
        "", "268.10M", "3.2B", "8B", "4K"]
