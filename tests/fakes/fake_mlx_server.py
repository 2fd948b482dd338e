"""A fake ``mlx_lm.server``: launched with the same flags, speaking its OpenAI routes.

Like mlx-lm's server it reads its flags with argparse (an unknown flag is an error, exit 2), loads
``--model`` (a path, relative to its working folder) *before* it binds ``--host``/``--port``, and
answers ``GET /v1/models`` (the Hugging Face cache, here always empty, plus the resolved
``--model`` folder), ``POST /v1/completions``, ``/v1/chat/completions`` and ``/chat/completions``,
streamed as server-sent events with ``stream``. A request whose ``model`` is neither the
``--model`` text nor ``default_model`` would make mlx-lm load that model: with ``HF_HUB_OFFLINE``
set that fails, and the fake answers 404 as mlx-lm does then (``{"error": "..."}``, not OpenAI's
shape). It has no ``/health`` and no ``/metrics`` (404), checks no API key, and logs like mlx-lm
(``<time> - INFO - ...``). Fault switches (environment):

    FAKE_LOAD_SECONDS     load this long before binding, printing a progress line each 0.2 s
    FAKE_EXIT_CODE        print a Python traceback and exit with this code while loading
    FAKE_CRASH_AFTER_S    exit 1 with a traceback this long after binding
    FAKE_UNLISTED         ``/v1/models`` lists only the (empty) cache, as older releases did
    FAKE_TOKENS           tokens per answer (default 6; max_tokens caps it)
    FAKE_TOKEN_DELAY_S    pause between streamed tokens
    FAKE_IGNORE_SIGTERM   ignore SIGTERM (only SIGKILL ends it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from aiohttp import web

WORDS = ["Hello", " from", " the", " fake", " mlx", " server", ".", " Apple", " silicon", " tokens"]


def log(level: str, message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp},000 - {level} - {message}", file=sys.stderr, flush=True)


def env_float(name: str, default: float = 0.0) -> float:
    raw = os.environ.get(name, "")
    return float(raw) if raw else default


def parse(argv: list[str]) -> argparse.Namespace:
    """mlx_lm.server's flags (the ones agent.api.mlx builds, and the ones it refuses)."""
    p = argparse.ArgumentParser(description="MLX Http Server.")
    p.add_argument("--model", type=str)
    p.add_argument("--adapter-path", type=str)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--draft-model", type=str, default=None)
    p.add_argument("--num-draft-tokens", type=int, default=3)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--log-level", type=str, default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
    p.add_argument("--chat-template", type=str, default="")
    p.add_argument("--use-default-chat-template", action="store_true")
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--chat-template-args", type=json.loads, default="{}")
    p.add_argument("--decode-concurrency", type=int, default=32)
    p.add_argument("--prompt-concurrency", type=int, default=8)
    p.add_argument("--prefill-step-size", type=int, default=2048)
    p.add_argument("--prompt-cache-size", type=int, default=10)
    p.add_argument("--prompt-cache-bytes", type=int)
    p.add_argument("--max-kv-size", type=int, default=None)
    return p.parse_args(argv)


def traceback_exit(message: str, code: int) -> None:
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "mlx_lm/server.py", line 1, in main', file=sys.stderr)
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


class FakeMlx:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model_dir = Path(args.model).resolve()
        self.created = int(time.time())

    def known(self, requested: str) -> bool:
        return requested in (self.args.model, "default_model")

    async def models(self, request: web.Request) -> web.Response:
        data = [] if os.environ.get("FAKE_UNLISTED") else [
            {"id": str(self.model_dir), "object": "model", "created": self.created}]
        return web.json_response({"object": "list", "data": data})

    async def completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chat = request.path != "/v1/completions"
        if chat and "messages" not in body:
            return web.json_response({"error": "Request did not contain messages"}, status=400)
        requested = body.get("model", "default_model")
        if not self.known(requested):
            log("ERROR", f"cannot load {requested}: offline mode is enabled")
            return web.json_response({"error": f"Repository Not Found for url: {requested} (offline)"}, status=404)
        max_tokens = body.get("max_tokens", self.args.max_tokens)
        count = max(0, min(int(os.environ.get("FAKE_TOKENS") or 6), max_tokens))
        words = [WORDS[i % len(WORDS)] for i in range(count)]
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4()}"
        kind = "chat.completion" if chat else "text_completion"
        base = {"id": ident, "system_fingerprint": "fake-mlx", "model": requested, "created": self.created}
        log("INFO", f"Prompt processing progress: 1/1 for {requested}")
        if not body.get("stream"):
            choice: dict[str, object] = {"index": 0, "finish_reason": "length" if count == max_tokens else "stop"}
            if chat:
                choice["message"] = {"role": "assistant", "content": "".join(words), "reasoning": None,
                                     "tool_calls": []}
            else:
                choice["text"] = "".join(words)
            return web.json_response({**base, "object": kind, "choices": [choice],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": count,
                                                "total_tokens": 3 + count}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        delay = env_float("FAKE_TOKEN_DELAY_S")
        for i, word in enumerate(words + [""]):
            last = i == len(words)
            choice = {"index": 0, "finish_reason": ("length" if count == max_tokens else "stop") if last else None}
            if chat:
                choice["delta"] = {"role": "assistant", "content": word, "reasoning": None, "tool_calls": []}
            else:
                choice["text"] = word
            await resp.write(f"data: {json.dumps({**base, 'object': kind + ('.chunk' if chat else ''), 'choices': [choice]})}\n\n".encode())
            if delay and not last:
                await asyncio.sleep(delay)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def serve(args: argparse.Namespace) -> None:
    fake = FakeMlx(args)
    app = web.Application()
    app.router.add_get("/v1/models", fake.models)
    app.router.add_get("/v1/models/{rest:.*}", fake.models)
    for path in ("/v1/completions", "/v1/chat/completions", "/chat/completions"):
        app.router.add_post(path, fake.completion)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    try:
        await site.start()
    except OSError as exc:
        traceback_exit(f"OSError: [Errno 48] Address already in use: {exc}", 1)
    log("WARNING", "mlx_lm.server is not recommended for production as it only implements basic security checks.")
    log("INFO", f"Starting httpd at {args.host} on port {args.port}...")
    crash = env_float("FAKE_CRASH_AFTER_S")
    if crash:
        await asyncio.sleep(crash)
        traceback_exit("RuntimeError: [METAL] Command buffer execution failed: Insufficient Memory", 1)
    await asyncio.Event().wait()


def main(argv: list[str]) -> None:
    args = parse(argv)
    if os.environ.get("FAKE_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log("INFO", f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')}")
    if args.model is None or not Path(args.model, "config.json").is_file():
        traceback_exit(f"huggingface_hub.errors.LocalEntryNotFoundError: cannot find {args.model} "
                       "(offline mode is enabled)", 1)
    code = os.environ.get("FAKE_EXIT_CODE")
    if code:
        traceback_exit("ValueError: Model type qwen9 not supported.", int(code))
    load = env_float("FAKE_LOAD_SECONDS")
    deadline = time.monotonic() + load
    while time.monotonic() < deadline:
        log("INFO", "Fetching 4 files: loading weights")
        time.sleep(0.2)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main(sys.argv[1:])
