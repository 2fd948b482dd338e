"""A fake ``llama-server``: launched with the same flags, speaking the same HTTP protocol.

It accepts (and ignores) every flag ``build_args`` produces and honours ``--host``, ``--port``,
``--alias``, ``--parallel``, ``--ctx-size`` and ``--embeddings``. With ``LLAMA_API_KEY`` in its
environment it requires ``Authorization: Bearer <key>`` on all but the public endpoints, as
llama-server does. Fault switches (environment):

    FAKE_LOAD_SECONDS     answer /health 503 "Loading model" this long, printing progress lines
    FAKE_LOAD_QUIET       print nothing while loading
    FAKE_EXIT_CODE        print an error line and exit with this code at start
    FAKE_CRASH_AFTER_S    exit with FAKE_CRASH_EXIT_CODE (default 1) this long after being ready
    FAKE_STALL            answer /health, never answer a completion
    FAKE_STALL_AFTER      answer this many completions, then stall as FAKE_STALL (1: the agent's
                          first-sight check of the build is answered, what follows it is not)
    FAKE_IGNORE_SIGTERM   ignore SIGTERM (only SIGKILL ends it)
    FAKE_TOKEN_DELAY_S    pause between generated tokens
    FAKE_TOKENS           tokens generated per answer (default 8; max_tokens caps it)
    FAKE_KEEPALIVE_S      close idle keep-alive connections after this long (llama-server: 5 s)
    FAKE_DROP_REUSED      hang up, unanswered, on any /v1 request on a reused connection
    FAKE_RESET_FIRST      hang up, unanswered, on the first N connections that carry a chat request
    FAKE_BREAK_AFTER      a stream dies after this many tokens: the connection is cut mid-answer
    FAKE_SILENT_AFTER     a stream goes silent after this many tokens, its connection held open (a wedged
                          runtime) until the client hangs up
    FAKE_SLOW_AFTER       after this many generations, generate FAKE_SLOW_FACTOR (default 10) times slower
                          (a runtime whose host starts swapping)
    FAKE_PROMPT_DELAY_S   a stream's headers come at once, its first token after this long (a long prompt
                          being read, as llama-server does); meanwhile its slot's
                          ``n_prompt_tokens_processed`` in /slots grows by a batch of 64 every 50 ms
    FAKE_PROMPT_WEDGED    a stream's headers come at once, its slot reads one batch of the prompt and then
                          stands still (a runtime wedged on the prompt): no token, until the client hangs up
    FAKE_STARTS_FILE      append one line to this file at every start (tests count spawns)
    FAKE_HEADERS_FILE     append a JSON line per /v1 request: its path and its W3C trace headers
                          (``traceparent``, ``tracestate``; null when absent)
    FAKE_USAGE_WHEN_ASKED a stream reports usage only with ``stream_options.include_usage``, in an
                          extra chunk with empty ``choices`` (today's llama-server; else: always,
                          in the final chunk, as older builds did)
    FAKE_FAST_WHEN        argv words ("--threads 1"): when the argv holds them in a row, generate
                          FAKE_FAST_FACTOR (default 10) times faster — a planted best configuration
    FAKE_FAST_ONCE        a file path: be fast only on the first such start (it creates the file),
                          a configuration that is faster by luck, not by design
    FAKE_FAIL_WHEN        argv words: when the argv holds them in a row, fail to load and exit 1
    FAKE_LEGACY_METRICS   also export the KV-cache gauges newer llama-server builds removed
                          (``llamacpp:kv_cache_usage_ratio``, ``llamacpp:kv_cache_tokens``)
    FAKE_TOOL_ARGS        a JSON text: the arguments of every tool call, instead of ones built
                          from the tool's schema (a model that calls its tools wrongly)
    FAKE_LOG_REQUESTS     print a "slot launch_slot_: ... processing task" line per generation
    FAKE_LOG_BODIES       print a "fake: body {...}" line (the request's JSON, keys sorted) per generation
    FAKE_BIND_DELAY_S     wait this long before binding the port (another server may take it first)
    FAKE_SIGILL           "load": die by SIGILL while loading; "generate": at the first generation
                          (what a build for another CPU does in its first matrix kernel)
    FAKE_VERSION          what ``--version`` prints (default ``version: 4242 (fa4e1234)``, a git build's
                          shape; this project's sdist build says ``version: 0.6.0-dev (build 0, commit unknown)``)

GPU backends: a fake "module" is a JSON file that ``GGML_BACKEND_PATH`` names (as the agent sets it
for a GPU backend, ``agent.runtimes.backends``): ``{"devices": [["Vulkan0", "Fake GPU", 8192, 8000]],
"list": "ok"|"crash"|"unloadable", "load": "ok"|"crash"|"no_offload"}``. ``--list-devices`` prints
its devices as llama-server does (or crashes by SIGSEGV, or says it failed to load the module);
a load then logs ``offloaded 19/19 layers to GPU`` and the buffer of each device (or dies by
SIGSEGV, or offloads nothing). Without a module it lists no device and offloads 0 layers.

By default it answers like today's llama-server: ``/metrics`` without KV-cache gauges, ``/slots``
with each slot's ``n_ctx`` and, once it has served a task, ``n_prompt_tokens`` (the tokens its
sequence holds, prompt and generated, kept after the task as the prompt cache); a chat request with
``tools`` is answered with a call of the first tool (or the one ``tool_choice`` names) whose
arguments fill the schema's required properties.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fake_module() -> dict[str, object] | None:
    """The fake GPU module ``GGML_BACKEND_PATH`` names, or None (see the docstring)."""
    path = os.environ.get("GGML_BACKEND_PATH")
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"list": "unloadable", "why": "invalid ELF header"}
    return data if isinstance(data, dict) else None


def crash_by_sigsegv(where: str) -> None:
    log(f"fake: crashing by SIGSEGV {where}, as the module asks")
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGSEGV)


def list_devices() -> int:
    module = fake_module()
    if module is not None and module.get("list") == "crash":
        crash_by_sigsegv("while listing devices")
    if module is not None and module.get("list") == "unloadable":
        print(f"load_backend: failed to load {os.environ['GGML_BACKEND_PATH']}: {module.get('why', 'cannot open')}",
              flush=True)
        module = None
    print("Available devices:", flush=True)
    devices = list(module.get("devices", [])) if module is not None else []
    if not devices:
        print("  (none)")
    for name, description, total, free in devices:
        print(f"  {name}: {description} ({total} MiB, {free} MiB free)")
    return 0


def answer_without_serving(argv: list[str]) -> int | None:
    """What llama-server answers and exits on (``--list-devices``, ``--version``), else None."""
    if "--list-devices" in argv:  # as llama-server: to stdout, then exit
        return list_devices()
    if "--version" in argv:  # as llama-server: to stderr, then exit
        log(os.environ.get("FAKE_VERSION", "version: 4242 (fa4e1234)"))
        log("built with fake cc for fake-arch")
        return 0
    return None


# The agent asks every new build --version: answered before aiohttp is imported (a third of a
# second of CPU at each agent start), which only serving needs.
if __name__ == "__main__" and (_answered := answer_without_serving(sys.argv[1:])) is not None:
    sys.exit(_answered)

from aiohttp import web  # after the answers above, which need none of it

_LOGGER = logging.getLogger(__name__)

PUBLIC_PATHS = {"/health", "/v1/health", "/models", "/v1/models"}
WORDS = ["Hello", " from", " the", " fake", " llama", " server", ".", " It", " streams", " tokens"]


def append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def env_float(name: str, default: float = 0.0) -> float:
    raw = os.environ.get(name, "")
    return float(raw) if raw else default


def error_body(code: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "type": kind}}, status=code)


class FakeServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.alias = args.alias or os.path.basename(args.model or "model.gguf")
        self.api_key = os.environ.get("LLAMA_API_KEY") or None
        self.loading = True
        self.stall = bool(os.environ.get("FAKE_STALL"))
        self.stall_after = int(env_float("FAKE_STALL_AFTER", -1))
        self.token_delay = env_float("FAKE_TOKEN_DELAY_S")
        if planted_fast(args.argv):
            self.token_delay /= env_float("FAKE_FAST_FACTOR", 10.0)
            log(f"fake: this configuration is planted fast ({os.environ['FAKE_FAST_WHEN']})")
        self.tokens = int(env_float("FAKE_TOKENS", 8))
        self.busy = [False] * args.parallel
        self.free_slot = asyncio.Condition()
        self.deferred = 0
        self.counters = {"prompt_tokens": 0, "tokens_predicted": 0, "requests": 0}
        self.held: list[int | None] = [None] * args.parallel  # tokens each slot's sequence holds
        self.reading: list[float | None] = [None] * args.parallel  # when each slot began reading its prompt
        self.done: list[int] = [0] * args.parallel  # each slot's prompt tokens read, once read

    def processed(self, slot: int) -> int:
        """The slot's ``n_prompt_tokens_processed``: a batch of 64 per 50 ms while it reads a prompt,
        one batch only when FAKE_PROMPT_WEDGED."""
        since = self.reading[slot]
        if since is None:
            return self.done[slot]
        batches = 1 if os.environ.get("FAKE_PROMPT_WEDGED") else 1 + int((time.monotonic() - since) / 0.05)
        return 64 * batches

    # --- slots -------------------------------------------------------------------------------
    async def acquire(self) -> int:
        async with self.free_slot:
            self.deferred += 1
            try:
                await self.free_slot.wait_for(lambda: not all(self.busy))
            finally:
                self.deferred -= 1
            slot = self.busy.index(False)
            self.busy[slot] = True
            return slot

    async def release(self, slot: int) -> None:
        async with self.free_slot:
            self.busy[slot] = False
            self.free_slot.notify_all()

    # --- middleware ----------------------------------------------------------------------------
    @web.middleware
    async def gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if (headers_file := os.environ.get("FAKE_HEADERS_FILE")) and request.path.startswith("/v1/"):
            seen = {"path": request.path, "traceparent": request.headers.get("traceparent"),
                    "tracestate": request.headers.get("tracestate")}
            seen.update({name: request.headers[name] for name in ("x-api-key", "Cookie") if name in request.headers})
            append_line(headers_file, json.dumps(seen))
        authorized = request.headers.get("Authorization", "") == f"Bearer {self.api_key}"
        if self.api_key and request.path not in PUBLIC_PATHS and not authorized:
            return error_body(401, "Invalid API Key", "authentication_error")
        if self.loading and request.path not in ("/health", "/v1/health"):
            return error_body(503, "Loading model", "unavailable_error")
        return await handler(request)

    # --- handlers ------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if self.loading:
            return error_body(503, "Loading model", "unavailable_error")
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.alias, "object": "model", "created": int(time.time()), "owned_by": "llamacpp"}]})

    async def slots(self, request: web.Request) -> web.Response:
        n_ctx = self.args.ctx_size // max(1, len(self.busy))  # a cache split per slot (not unified)
        slots = []
        for i, busy in enumerate(self.busy):
            slot: dict[str, Any] = {"id": i, "n_ctx": n_ctx, "speculative": False, "is_processing": busy}
            if self.held[i] is not None:
                slot.update(id_task=self.counters["requests"], n_prompt_tokens=self.held[i],
                            n_prompt_tokens_processed=self.processed(i), n_prompt_tokens_cache=0)
            slots.append(slot)
        return web.json_response(slots)

    async def metrics(self, request: web.Request) -> web.Response:
        processing = sum(self.busy)
        lines = [
            "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
            "# TYPE llamacpp:prompt_tokens_total counter",
            f"llamacpp:prompt_tokens_total {self.counters['prompt_tokens']}",
            "# TYPE llamacpp:tokens_predicted_total counter",
            f"llamacpp:tokens_predicted_total {self.counters['tokens_predicted']}",
            "# TYPE llamacpp:requests_processing gauge",
            f"llamacpp:requests_processing {processing}",
            "# TYPE llamacpp:requests_deferred gauge",
            f"llamacpp:requests_deferred {self.deferred}",
        ]
        if os.environ.get("FAKE_LEGACY_METRICS"):
            held = sum(h or 0 for h in self.held)
            lines += ["# TYPE llamacpp:kv_cache_usage_ratio gauge",
                      f"llamacpp:kv_cache_usage_ratio {held / max(1, self.args.ctx_size):.3f}",
                      "# TYPE llamacpp:kv_cache_tokens gauge", f"llamacpp:kv_cache_tokens {held}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def embeddings(self, request: web.Request) -> web.Response:
        if not self.args.embeddings:
            return error_body(501, "This server does not support embeddings. Start it with `--embeddings`",
                              "not_supported_error")
        body = await request.json()
        inputs = body.get("input", "")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        data = []
        for i, text in enumerate(inputs):
            digest = hashlib.sha256(str(text).encode()).digest()
            data.append({"object": "embedding", "index": i, "embedding": [b / 255.0 for b in digest[:8]]})
        tokens = sum(len(str(t).split()) for t in inputs)
        self.counters["prompt_tokens"] += tokens
        return web.json_response({"object": "list", "model": self.alias, "data": data,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=False)

    async def generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if os.environ.get("FAKE_SIGILL") == "generate":
            die_by_sigill()
        try:
            body = request["body"] = await request.json()
        except ValueError:
            return error_body(400, "invalid JSON body", "invalid_request_error")
        if os.environ.get("FAKE_LOG_BODIES"):
            log(f"fake: body {json.dumps(body, sort_keys=True)}")
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        else:
            prompt = str(body.get("prompt", ""))
        prompt_tokens = max(1, len(prompt.split()))
        limit = body.get("max_tokens") or body.get("n_predict") or self.tokens
        count = max(0, min(self.tokens, int(limit)))
        slot = await self.acquire()
        try:
            self.counters["prompt_tokens"] += prompt_tokens
            self.counters["requests"] += 1
            self.held[slot] = prompt_tokens
            if os.environ.get("FAKE_LOG_REQUESTS"):
                log(f"slot launch_slot_: id  {slot} | task {self.counters['requests']} | processing task")
            call = tool_call(body) if chat else None
            if call is not None:
                return await self.answer_tool_call(request, body, call, prompt_tokens)
            if self.stall or 0 <= self.stall_after < self.counters["requests"]:
                await asyncio.Future()  # never answers; a disconnect cancels this handler
            if body.get("stream"):
                return await self.stream(request, chat, prompt_tokens, count, slot)
            pieces = []
            for i in range(count):
                await self.tick()
                self.held[slot] = prompt_tokens + i  # the newest token is not in the cache yet
                pieces.append(WORDS[i % len(WORDS)])
            return web.json_response(self.whole(chat, "".join(pieces), prompt_tokens, count))
        finally:
            self.reading[slot] = None
            await self.release(slot)

    async def tick(self) -> None:
        if self.token_delay:
            slow_after = env_float("FAKE_SLOW_AFTER", -1)
            slower = slow_after >= 0 and self.counters["requests"] > slow_after
            await asyncio.sleep(self.token_delay * (env_float("FAKE_SLOW_FACTOR", 10.0) if slower else 1.0))
        self.counters["tokens_predicted"] += 1

    def whole(self, chat: bool, text: str, prompt_tokens: int, count: int) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if count >= self.tokens else "stop"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.alias, "choices": [choice],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                          "total_tokens": prompt_tokens + count}}

    async def answer_tool_call(self, request: web.Request, body: dict[str, Any], call: dict[str, str],
                               prompt_tokens: int) -> web.StreamResponse:
        """A call of one tool, as llama-server answers a tool-capable model: streamed in deltas (the
        name first, then the arguments in pieces) or whole, with finish_reason "tool_calls"."""
        ident, count = f"chatcmpl-{uuid.uuid4().hex[:12]}", max(1, len(call["arguments"]) // 4)
        self.counters["tokens_predicted"] += count
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count, "total_tokens": prompt_tokens + count}
        call_id = f"call_{uuid.uuid4().hex[:8]}"
        if not body.get("stream"):
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": call}]}
            return web.json_response({"id": ident, "object": "chat.completion", "created": int(time.time()),
                                      "model": self.alias, "usage": usage, "choices": [
                                          {"index": 0, "finish_reason": "tool_calls", "message": message}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            data = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": self.alias, "choices": [{"index": 0, "finish_reason": finish, "delta": delta}], **extra}
            return f"data: {json.dumps(data)}\n\n".encode()

        await response.write(event({"role": "assistant", "content": None}))
        await response.write(event({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                                    "function": {"name": call["name"], "arguments": ""}}]}))
        text = call["arguments"]
        for start in range(0, len(text), 8):
            await self.tick()
            await response.write(event({"tool_calls": [{"index": 0, "function": {"arguments": text[start:start + 8]}}]}))
        await response.write(event({}, "tool_calls", usage=usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def stream(self, request: web.Request, chat: bool, prompt_tokens: int, count: int,
                     slot: int = 0) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(piece: str | None, finish: str | None, **extra: Any) -> bytes:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {} if piece is None else {"content": piece}
            else:
                choice["text"] = piece or ""
            event = {"id": ident, "object": kind, "created": int(time.time()), "model": self.alias,
                     "choices": [choice], **extra}
            return f"data: {json.dumps(event)}\n\n".encode()

        if os.environ.get("FAKE_PROMPT_WEDGED"):
            self.reading[slot] = time.monotonic()
            await asyncio.Future()  # wedged on the prompt: the client's hang-up cancels this
        if prompt_delay := env_float("FAKE_PROMPT_DELAY_S"):
            self.reading[slot] = time.monotonic()
            await asyncio.sleep(prompt_delay)  # the prompt is read: the headers went out, no token yet
            self.done[slot], self.reading[slot] = self.processed(slot), None
        if chat:
            await response.write(f"data: {json.dumps({'id': ident, 'object': kind, 'model': self.alias, 'choices': [{'index': 0, 'finish_reason': None, 'delta': {'role': 'assistant', 'content': None}}]})}\n\n".encode())
        break_after = int(env_float("FAKE_BREAK_AFTER", -1))
        silent_after = int(env_float("FAKE_SILENT_AFTER", -1))
        for i in range(count):
            if i == silent_after:
                await asyncio.Future()  # wedged: nothing more, until the client's hang-up cancels this
            if i == break_after and request.transport is not None:
                request.transport.abort()  # dies mid-answer: no final chunk, no [DONE]
                raise ConnectionResetError("FAKE_BREAK_AFTER")
            await self.tick()
            self.held[slot] = prompt_tokens + i  # the newest token is not in the cache yet
            await response.write(chunk(WORDS[i % len(WORDS)], None))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count, "total_tokens": prompt_tokens + count}
        finish = "length" if count >= self.tokens else "stop"
        if os.environ.get("FAKE_USAGE_WHEN_ASKED"):
            await response.write(chunk(None, finish))
            if (request["body"].get("stream_options") or {}).get("include_usage") is True:
                event = {"id": ident, "object": kind, "created": int(time.time()), "model": self.alias,
                         "choices": [], "usage": usage}
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
        else:
            await response.write(chunk(None, finish, usage=usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    @web.middleware
    async def drop_reused(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """FAKE_DROP_REUSED: hang up on a request that arrives on a reused keep-alive connection,
        unanswered, as llama-server does to a connection its keep-alive timer is closing."""
        transport = request.transport
        reset_first = int(env_float("FAKE_RESET_FIRST"))
        if reset_first and transport is not None and request.path == "/v1/chat/completions" \
                and id(transport) not in self.connections_seen:
            self.connections_seen.add(id(transport))
            if len(self.connections_seen) <= reset_first:
                transport.abort()
                raise ConnectionResetError(f"reset connection {len(self.connections_seen)} (FAKE_RESET_FIRST)")
        if os.environ.get("FAKE_DROP_REUSED") and transport is not None and request.path.startswith("/v1/"):
            key = id(transport)
            self.requests_on[key] = self.requests_on.get(key, 0) + 1
            if self.requests_on[key] > 1:
                transport.abort()
                raise ConnectionResetError("dropped a reused connection")
        return await handler(request)

    def app(self) -> web.Application:
        self.requests_on: dict[int, int] = {}
        self.connections_seen: set[int] = set()
        app = web.Application(middlewares=[self.drop_reused, self.gate])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/health", self.health)
        app.router.add_get("/models", self.models)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/slots", self.slots)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/embeddings", self.embeddings)
        return app


def example_value(schema: dict[str, Any]) -> Any:
    """A value valid against a simple JSON schema: its first enum value, else one of its type."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: example_value(props.get(name, {})) for name in schema.get("required", [])}
    return {"array": [], "integer": 1, "number": 1.0, "boolean": True, "null": None}.get(kind, "Paris")


def tool_call(body: dict[str, Any]) -> dict[str, str] | None:
    """The call a request with ``tools`` gets: its ``tool_choice`` function, else its first tool."""
    tools = [t.get("function") or {} for t in body.get("tools") or [] if isinstance(t, dict)]
    if not tools or body.get("tool_choice") == "none":
        return None
    choice = body.get("tool_choice")
    wanted = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    tool = next((t for t in tools if t.get("name") == wanted), tools[0])
    arguments = os.environ.get("FAKE_TOOL_ARGS") or json.dumps(example_value(tool.get("parameters") or {"type": "object"}))
    return {"name": str(tool.get("name", "")), "arguments": arguments}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("-a", "--alias", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("-np", "--parallel", type=int, default=4)
    parser.add_argument("-c", "--ctx-size", type=int, default=4096)
    parser.add_argument("--embeddings", "--embedding", action="store_true")
    args, _ignored = parser.parse_known_args(argv)
    args.argv = list(argv)
    return args


def argv_holds(argv: list[str], wanted: str) -> bool:
    """True when the words of ``wanted`` appear in ``argv`` one after the other."""
    words = wanted.split()
    return bool(words) and any(argv[i:i + len(words)] == words for i in range(len(argv)))


def planted_fast(argv: list[str]) -> bool:
    if not argv_holds(argv, os.environ.get("FAKE_FAST_WHEN", "")):
        return False
    once = os.environ.get("FAKE_FAST_ONCE")
    if not once:
        return True
    try:
        with open(once, "x", encoding="utf-8") as marker:  # only the first start gets lucky
            marker.write(str(os.getpid()))
        return True
    except FileExistsError:
        return False


async def serve(args: argparse.Namespace) -> int:
    fake = FakeServer(args)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    if os.environ.get("FAKE_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("fake: ignoring SIGTERM as asked")
    else:
        loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    runner = web.AppRunner(fake.app(), handler_cancellation=True, access_log=None, shutdown_timeout=0.5,
                           keepalive_timeout=env_float("FAKE_KEEPALIVE_S", 75.0))
    await runner.setup()
    bind_delay = env_float("FAKE_BIND_DELAY_S")
    if bind_delay:
        log(f"fake: waiting {bind_delay:g} s before binding, as asked")
        await asyncio.sleep(bind_delay)
    try:
        await web.TCPSite(runner, args.host, args.port).start()
    except OSError as exc:
        log(f"error: couldn't bind HTTP server socket, hostname: {args.host}, port: {args.port}: {exc}")
        return 1
    log(f"main: HTTP server is listening, hostname: {args.host}, port: {args.port}")
    log(f"llama_model_loader: loading model from {args.model}")
    if os.environ.get("FAKE_SIGILL") == "load":
        die_by_sigill()
    log_offload(args.argv)
    load_for = env_float("FAKE_LOAD_SECONDS")
    started = time.monotonic()
    while time.monotonic() - started < load_for and not done.is_set():
        if not os.environ.get("FAKE_LOAD_QUIET"):
            log(f"llama_model_load: loading tensors ... {time.monotonic() - started:.1f} s")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), min(0.2, load_for))
    if done.is_set():
        log("main: interrupted while loading")
        await runner.cleanup()
        return 0
    log("main: model loaded")
    log(f"main: server is listening on http://{args.host}:{args.port} - starting the main loop")
    log("srv  update_slots: all slots are idle")
    fake.loading = False
    crash_after = env_float("FAKE_CRASH_AFTER_S", -1.0)
    if crash_after >= 0:
        loop.call_later(crash_after, crash)
    await done.wait()
    log("srv  operator(): received SIGTERM, shutting down")
    await runner.cleanup()
    return 0


def die_by_sigill() -> None:
    log("load_backend: loaded CPU backend from ./libggml-cpu-fake.so")
    signal.signal(signal.SIGILL, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGILL)


def crash() -> None:
    log("GGML_ASSERT: fake crash as asked (FAKE_CRASH_AFTER_S)")
    os._exit(int(env_float("FAKE_CRASH_EXIT_CODE", 1)))


LAYERS = 19  # Gemma 3 270M's count (18 blocks and the output layer)


def log_offload(argv: list[str]) -> None:
    """What llama-server's load says about placement: layers to the GPU, buffers per device."""
    module = fake_module()
    devices = list(module.get("devices", [])) if module is not None and module.get("list", "ok") == "ok" else []
    if module is not None and module.get("load") == "crash":
        crash_by_sigsegv("while loading onto the GPU")
    on_gpu = LAYERS if devices and module is not None and module.get("load") != "no_offload" else 0
    if "--n-gpu-layers" in argv:
        asked = argv[argv.index("--n-gpu-layers") + 1]
        if asked not in ("-1", "auto", "all"):
            on_gpu = min(on_gpu, int(asked))
    log(f"load_tensors: offloaded {on_gpu}/{LAYERS} layers to GPU")
    if on_gpu:
        log(f"load_tensors: {devices[0][0]:>12} model buffer size = {1.5 * on_gpu:8.2f} MiB")
    log(f"load_tensors: {'CPU_Mapped':>12} model buffer size = {1.5 * (LAYERS - on_gpu) + 40:8.2f} MiB")
    log(f"llama_kv_cache: {devices[0][0] if on_gpu else 'CPU':>10} KV buffer size = 18.00 MiB")


def main(argv: list[str] | None = None) -> int:
    answered = answer_without_serving(sys.argv[1:] if argv is None else argv)
    if answered is not None:
        return answered
    args = parse(list(sys.argv[1:] if argv is None else argv))
    log(f"build: fake llama-server (pid {os.getpid()})")
    if os.environ.get("FAKE_STARTS_FILE"):
        with open(os.environ["FAKE_STARTS_FILE"], "a", encoding="utf-8") as starts:
            starts.write(f"{os.getpid()}\n")
    exit_code = os.environ.get("FAKE_EXIT_CODE")
    if argv_holds(args.argv, os.environ.get("FAKE_FAIL_WHEN", "")):
        exit_code = exit_code or "1"
    if exit_code:
        log(f"llama_model_load: error loading model: fake failure for {args.model}")
        log("main: exiting due to model loading error")
        return int(exit_code)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    import gc

    gc.freeze()  # as mirbadllm/__main__.py: the exit's last collection skips the imports (0.15 s of CPU)
    sys.exit(main())
