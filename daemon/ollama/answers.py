"""OpenAI answers in Ollama's shape: a whole answer, or an SSE stream as NDJSON lines, each ending
with Ollama's counters (``done: true``, ``done_reason``, the token counts and durations in ns).

Durations come from llama-server's ``timings`` where the answer has them; otherwise from the clock
here: the wait for the first token counts as prompt evaluation, the rest as generation.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from aiohttp import StreamReader

_LOGGER = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000
# OpenAI's finish_reason -> Ollama's done_reason (a tool call ends a turn with "stop" in Ollama).
DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop", "function_call": "stop",
                "content_filter": "stop"}


class UpstreamError(Exception):
    """The stream's error event: /v1 or the runtime refused or failed after the answer began."""


def created_at() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _ns(seconds: float) -> int:
    return max(0, int(seconds * NS_PER_S))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments as Ollama sends them: an object, not a JSON text."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        _LOGGER.warning("a tool call's arguments are not JSON, sent as {}: %.200s", text)
        return {}
    return value if isinstance(value, dict) else {"value": value}


def tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool calls (arguments a JSON text) as Ollama's (arguments an object)."""
    out = []
    for call in calls:
        function = call.get("function") or {}
        out.append({"function": {"name": str(function.get("name") or ""),
                                 "arguments": _arguments(str(function.get("arguments") or ""))}})
    return out


class Answer:
    """One /api/chat or /api/generate answer being put into Ollama's shape (``chat``: a message,
    else a ``response`` text), with what its counters need."""

    def __init__(self, model: str, chat: bool) -> None:
        self.model, self.chat = model, chat
        self.started = time.perf_counter()
        self.first_token: float | None = None
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.finish: str | None = None
        self.pieces = 0
        self._calls: dict[int, dict[str, Any]] = {}  # a stream's tool calls, assembled from their deltas

    def _line(self, text: str, thinking: str | None = None, calls: list[dict[str, Any]] | None = None,
              ) -> dict[str, Any]:
        line: dict[str, Any] = {"model": self.model, "created_at": created_at(), "done": False}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            line["message"] = message
        else:
            line["response"] = text
            if thinking:
                line["thinking"] = thinking
        return line

    # --- a stream ----------------------------------------------------------------------------
    def chunk(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The Ollama lines one OpenAI stream chunk makes (none for a chunk of usage or a role)."""
        if "error" in event:
            error = event["error"]
            raise UpstreamError(str(error.get("message") if isinstance(error, dict) else error))
        self._note(event)
        lines = []
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content") if "delta" in choice else choice.get("text")
            thinking = delta.get("reasoning_content")
            for call in delta.get("tool_calls") or []:
                self._add_call(call)
            if text or thinking:
                self.pieces += 1
                if self.first_token is None:
                    self.first_token = time.perf_counter()
                lines.append(self._line(text or "", thinking))
        return lines

    def _note(self, event: dict[str, Any]) -> None:
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        for choice in event.get("choices") or []:
            if isinstance(choice, dict) and choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", 0) if isinstance(delta.get("index"), int) else 0
        call = self._calls.setdefault(index, {"function": {"name": "", "arguments": ""}})
        function = delta.get("function") or {}
        call["function"]["name"] += str(function.get("name") or "")
        call["function"]["arguments"] += str(function.get("arguments") or "")

    def last(self) -> list[dict[str, Any]]:
        """The stream's end: its tool calls (whole, as Ollama sends them), then the counters."""
        lines = []
        if self._calls:
            if self.first_token is None:
                self.first_token = time.perf_counter()
            lines.append(self._line("", calls=tool_calls([self._calls[i] for i in sorted(self._calls)])))
        return [*lines, {**self._line(""), **self.counters()}]

    # --- a whole answer ----------------------------------------------------------------------
    def whole(self, answer: dict[str, Any]) -> dict[str, Any]:
        """A non-streamed OpenAI answer as Ollama's one answer."""
        self._note(answer)
        choices = answer.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        text = message.get("content") if "message" in choice else choice.get("text")
        calls = tool_calls(message.get("tool_calls") or [])
        self.pieces = 1 if text else 0
        return {**self._line(text or "", message.get("reasoning_content"), calls), **self.counters()}

    def counters(self) -> dict[str, Any]:
        """Ollama's last-line fields: done, done_reason, total/load/prompt/eval durations and counts."""
        end = time.perf_counter()
        total = end - self.started
        prompt_ms, predicted_ms = _number(self.timings.get("prompt_ms")), _number(self.timings.get("predicted_ms"))
        if self.first_token is None:  # a whole answer: no token times here
            waited, generating = 0.0, total
        else:
            waited, generating = self.first_token - self.started, end - self.first_token
        prompt_s = waited if prompt_ms is None else prompt_ms / 1000
        eval_s = generating if predicted_ms is None else predicted_ms / 1000
        load_s = max(0.0, waited - prompt_s) if prompt_ms is not None else 0.0
        prompt_n = _number(self.usage.get("prompt_tokens")) or _number(self.timings.get("prompt_n")) or 0
        eval_n = _number(self.usage.get("completion_tokens")) or _number(self.timings.get("predicted_n"))
        return {"done": True, "done_reason": DONE_REASONS.get(self.finish or "stop", "stop"),
                "total_duration": _ns(total), "load_duration": _ns(load_s),
                "prompt_eval_count": int(prompt_n), "prompt_eval_duration": _ns(prompt_s),
                "eval_count": int(eval_n if eval_n is not None else self.pieces), "eval_duration": _ns(eval_s)}


def embeddings(answer: dict[str, Any], model: str, started: float) -> dict[str, Any]:
    """``/v1/embeddings``' answer as ``/api/embed``'s."""
    data = sorted((d for d in answer.get("data") or [] if isinstance(d, dict)), key=lambda d: d.get("index", 0))
    usage = answer.get("usage") or {}
    return {"model": model, "embeddings": [d.get("embedding") or [] for d in data],
            "total_duration": _ns(time.perf_counter() - started), "load_duration": 0,
            "prompt_eval_count": int(_number(usage.get("prompt_tokens")) or 0)}


async def sse_events(content: StreamReader) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an SSE stream, until ``[DONE]`` or its end; comments (the router's
    heartbeats) and other fields are skipped. Lines are split here: an event may be longer than
    aiohttp's line limit."""
    pending = b""
    async for piece in content.iter_any():
        pending += piece
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                event = json.loads(data)
            except ValueError:
                _LOGGER.warning("skipped an SSE event that is not JSON: %.200r", data)
                continue
            if isinstance(event, dict):
                yield event
