"""Timed calls to one runtime: a streamed chat, an embeddings request, the slot list.

Benchmarks talk to the runtime itself (its loopback port with the instance key, or through the
node's agent), never through ``/v1``: the router refuses the model while a job runs on it.
Timing: TTFT is the first chunk that carries generated text or a tool call; tokens come from the
``usage`` the runtime reports at the end of the stream.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass(frozen=True)
class RuntimeTarget:
    """Where one runtime answers: ``base`` + ``/v1/...``, with the headers it needs."""

    base: str
    headers: dict[str, str]
    session: aiohttp.ClientSession
    served_name: str
    read_timeout_s: float = 600.0

    def timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=self.read_timeout_s)


@dataclass
class ChatTiming:
    ok: bool
    error: str | None = None
    ttft_s: float | None = None
    total_s: float = 0.0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)

    @property
    def decode_tps(self) -> float | None:
        """Tokens ÷ (total − TTFT): the rate after the first token."""
        if not self.ok or self.ttft_s is None or self.total_s <= self.ttft_s or not self.completion_tokens:
            return None
        return self.completion_tokens / (self.total_s - self.ttft_s)


def _merge_tool_calls(calls: list[dict[str, str]], deltas: list[dict[str, Any]]) -> None:
    for delta in deltas:
        index = int(delta.get("index", len(calls)))
        while len(calls) <= index:
            calls.append({"name": "", "arguments": ""})
        fn = delta.get("function") or {}
        calls[index]["name"] += fn.get("name") or ""
        calls[index]["arguments"] += fn.get("arguments") or ""


def _apply_event(timing: ChatTiming, event: dict[str, Any], started: float) -> None:
    usage = event.get("usage")
    if isinstance(usage, dict):
        timing.completion_tokens = int(usage.get("completion_tokens") or 0)
        timing.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        piece = delta.get("content") or delta.get("reasoning_content") or ""
        calls = delta.get("tool_calls") or []
        if (piece or calls) and timing.ttft_s is None:
            timing.ttft_s = time.perf_counter() - started
        timing.text += delta.get("content") or ""
        _merge_tool_calls(timing.tool_calls, calls)


async def timed_chat(target: RuntimeTarget, messages: list[dict[str, Any]], max_tokens: int, *,
                     ignore_eos: bool = True, tools: list[dict[str, Any]] | None = None) -> ChatTiming:
    """One streamed chat completion at temperature 0, timed from the request to the last byte."""
    body: dict[str, Any] = {"model": target.served_name, "messages": messages, "max_tokens": max_tokens,
                            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    if tools:
        body["tools"], body["tool_choice"] = tools, "required"
    for attempt in range(2):
        try:
            return await _stream(target, body)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            # The runtime hung up (a reused connection it had closed, or a reset): the timing starts
            # again with the retry, so one retry still measures one whole request.
            if attempt:
                return ChatTiming(ok=False, error=f"{type(exc).__name__}: {exc}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return ChatTiming(ok=False, error=f"{type(exc).__name__}: {exc}".strip())
    raise AssertionError("unreachable")


async def _stream(target: RuntimeTarget, body: dict[str, Any]) -> ChatTiming:
    timing = ChatTiming(ok=False)
    started = time.perf_counter()
    async with target.session.post(f"{target.base}/v1/chat/completions", json=body,
                                   headers=target.headers, timeout=target.timeout()) as resp:
        if resp.status != 200:
            timing.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            return timing
        async for raw in resp.content:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            try:
                _apply_event(timing, json.loads(line[5:]), started)
            except ValueError:
                continue
    timing.total_s = time.perf_counter() - started
    timing.ok = timing.ttft_s is not None
    if not timing.ok:
        timing.error = "the stream carried no generated token"
    return timing


@dataclass
class EmbeddingTiming:
    ok: bool
    error: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    valid: bool = False
    norms: list[float] = field(default_factory=list)


def _vectors_valid(data: Any, inputs: int) -> tuple[bool, list[float]]:
    """One finite, non-zero vector per input, all of one dimension; their lengths."""
    if not isinstance(data, list) or len(data) != inputs:
        return False, []
    vectors: list[list[Any]] = [d["embedding"] for d in data
                                if isinstance(d, dict) and isinstance(d.get("embedding"), list) and d["embedding"]]
    if len(vectors) != inputs:
        return False, []
    dims = {len(v) for v in vectors}
    try:
        norms = [math.sqrt(sum(float(x) * float(x) for x in v)) for v in vectors]
    except (TypeError, ValueError):
        return False, []
    finite = all(math.isfinite(n) and n > 0 for n in norms)
    return len(dims) == 1 and finite, norms


async def timed_embeddings(target: RuntimeTarget, inputs: list[str]) -> EmbeddingTiming:
    body = {"model": target.served_name, "input": inputs}
    started = time.perf_counter()
    try:
        async with target.session.post(f"{target.base}/v1/embeddings", json=body, headers=target.headers,
                                       timeout=target.timeout()) as resp:
            text = await resp.text()
            latency = time.perf_counter() - started
            if resp.status != 200:
                return EmbeddingTiming(ok=False, error=f"HTTP {resp.status}: {text[:300]}", latency_s=latency)
            payload = json.loads(text)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return EmbeddingTiming(ok=False, error=f"{type(exc).__name__}: {exc}".strip())
    valid, norms = _vectors_valid(payload.get("data"), len(inputs))
    tokens = int((payload.get("usage") or {}).get("prompt_tokens") or 0)
    return EmbeddingTiming(ok=True, latency_s=latency, prompt_tokens=tokens, valid=valid, norms=norms)


async def slot_facts(target: RuntimeTarget) -> tuple[int | None, int | None]:
    """(slots, context per slot) from the runtime's ``/slots``; Nones when it does not say."""
    try:
        async with target.session.get(f"{target.base}/slots", headers=target.headers,
                                      timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None, None
            slots = await resp.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None, None
    if not isinstance(slots, list) or not slots:
        return None, None
    contexts = [int(s["n_ctx"]) for s in slots if isinstance(s, dict) and isinstance(s.get("n_ctx"), int)]
    return len(slots), (min(contexts) if contexts else None)
