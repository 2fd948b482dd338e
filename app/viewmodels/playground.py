"""The Playground: chat with a ready model through ``/v1/chat/completions``, streamed token by token.

It talks to the daemon's OpenAI side exactly as any client would (aiohttp, SSE), so what works
here works for the user's own tools. Each answer records its time to first token and tokens/s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.models import ModelState

_LOGGER = logging.getLogger(__name__)

# Generations have no read timeout (a long answer is not a hung one); connecting does.
_STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=None)


class ChatError(Exception):
    """The endpoint refused or broke off; the message is the OpenAI error text when there is one."""


@dataclass(frozen=True)
class AnswerStats:
    ttft_ms: float | None
    tokens: int
    tokens_per_s: float | None
    finish_reason: str | None = None

    def describe(self) -> str:
        parts = []
        if self.ttft_ms is not None:
            parts.append(f"TTFT {self.ttft_ms:.0f} ms")
        parts.append(f"{self.tokens} tokens")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:.1f} tok/s")
        if self.finish_reason and self.finish_reason != "stop":
            parts.append(f"finished: {self.finish_reason}")
        return " · ".join(parts)


@dataclass(frozen=True)
class ChatMessage:
    role: str  # user | assistant
    content: str
    model: str = ""
    stats: AnswerStats | None = None
    error: str | None = None
    streaming: bool = False


@dataclass(frozen=True)
class PlaygroundState:
    models: tuple[str, ...] = ()  # served names of ready models
    model: str = ""
    system_prompt: str = "You are a helpful assistant."
    temperature: float = 0.7
    max_tokens: int = 512
    api_key: str = ""
    keys_required: bool = False
    messages: tuple[ChatMessage, ...] = ()
    busy: bool = False


async def stream_chat(session: aiohttp.ClientSession, api_url: str, body: dict[str, Any],
                      api_key: str = "") -> AsyncIterator[dict[str, Any]]:
    """POST ``{api_url}/chat/completions`` with ``stream`` on; yields each SSE chunk as JSON."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.post(f"{api_url}/chat/completions", json={**body, "stream": True},
                                headers=headers, timeout=_STREAM_TIMEOUT) as resp:
            if resp.status >= 400:
                raise ChatError(_error_text(resp.status, await resp.text()))
            async for raw in resp.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                yield json.loads(data)
    except aiohttp.ClientError as exc:
        raise ChatError(f"cannot reach {api_url}: {exc}") from exc


def _error_text(status: int, text: str) -> str:
    try:
        return f"{json.loads(text)['error']['message']} ({status})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {text[:300]}"


class PlaygroundViewModel:
    def __init__(self, fleet: FleetViewModel, session_factory: Any = aiohttp.ClientSession) -> None:
        self.fleet = fleet
        self.state: Observable[PlaygroundState] = Observable(PlaygroundState())
        self._session_factory = session_factory
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        fleet.snapshot.subscribe(self._on_fleet, now=True)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        ready = tuple(m.definition.served_name for m in snapshot.models if m.status.state == ModelState.READY)
        s = self.state.value
        model = s.model if s.model in ready else (ready[0] if ready else "")
        if ready != s.models or model != s.model or snapshot.keys_required != s.keys_required:
            self.state.set(replace(s, models=ready, model=model, keys_required=snapshot.keys_required))

    def configure(self, **changes: Any) -> None:
        """Set model, system_prompt, temperature, max_tokens or api_key."""
        allowed = {"model", "system_prompt", "temperature", "max_tokens", "api_key"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"not a playground setting: {sorted(unknown)}")
        self.state.set(replace(self.state.value, **changes))

    def clear(self) -> None:
        self.stop()
        self.state.set(replace(self.state.value, messages=()))

    def send(self, text: str) -> asyncio.Task[None] | None:
        s = self.state.value
        if s.busy or not text.strip() or not s.model:
            return None
        history = s.messages + (ChatMessage("user", text.strip()),)
        self.state.set(replace(s, messages=history + (ChatMessage("assistant", "", s.model, streaming=True),),
                               busy=True))
        self._task = asyncio.ensure_future(self._answer(history))
        return self._task

    def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def close(self) -> None:
        self.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _body(self, history: tuple[ChatMessage, ...]) -> dict[str, Any]:
        s = self.state.value
        messages = [{"role": "system", "content": s.system_prompt}] if s.system_prompt.strip() else []
        messages += [{"role": m.role, "content": m.content} for m in history if not m.error]
        return {"model": s.model, "messages": messages, "temperature": s.temperature,
                "max_tokens": s.max_tokens, "stream_options": {"include_usage": True}}

    def _update_answer(self, **changes: Any) -> None:
        s = self.state.value
        last = replace(s.messages[-1], **changes)
        self.state.set(replace(s, messages=s.messages[:-1] + (last,)))

    async def _answer(self, history: tuple[ChatMessage, ...]) -> None:
        if self._session is None:
            self._session = self._session_factory()
        started = time.perf_counter()
        first: float | None = None
        pieces = 0
        usage_tokens: int | None = None
        finish: str | None = None
        text = ""

        def stats() -> AnswerStats:
            end = time.perf_counter()
            tokens = usage_tokens if usage_tokens is not None else pieces
            rate = tokens / (end - first) if first is not None and end > first and tokens > 1 else None
            ttft = (first - started) * 1000 if first is not None else None
            return AnswerStats(ttft, tokens, rate, finish)

        try:
            async for chunk in stream_chat(self._session, self.fleet.snapshot.value.api_url,
                                           self._body(history), self.state.value.api_key):
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens", usage_tokens)
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                    finish = choice.get("finish_reason") or finish
                    if piece:
                        first = first or time.perf_counter()
                        pieces += 1
                        text += piece
                        self._update_answer(content=text)
            self._update_answer(streaming=False, stats=stats())
        except asyncio.CancelledError:
            finish = "stopped by you"
            self._update_answer(streaming=False, stats=stats())
        except (ChatError, ValueError) as exc:
            self._update_answer(streaming=False, error=str(exc), stats=None)
        finally:
            self.state.set(replace(self.state.value, busy=False))
