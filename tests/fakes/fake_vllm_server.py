"""A fake vLLM OpenAI server (stdlib only: it runs inside a test image with a bare Python).

Started as the image's entrypoint with ``vllm serve``'s flags after it; it honours ``--model``,
``--served-model-name``, ``--host``, ``--port``, ``--api-key`` (or ``VLLM_API_KEY``, as vLLM
does) and ignores the rest. Routes as vLLM has them: ``/health`` (public), ``/v1/models``,
``/v1/chat/completions`` (streamed or not), ``/v1/completions`` and ``/metrics`` with ``vllm:*``
series labelled by ``model_name``.

Fault switches come from ``fake_vllm.json`` in the model folder (the tests write it there; the
folder is bound read-only into the container) or from ``FAKE_*`` environment variables:

    exit_code / FAKE_EXIT_CODE              print an error line and exit with it at start
    crash_after / FAKE_CRASH_AFTER          exit 3 after answering this many generations
    load_seconds / FAKE_LOAD_SECONDS        load (print progress, do not listen) this long first
    legacy_metrics / FAKE_LEGACY_METRICS    export ``vllm:gpu_cache_usage_perc`` instead of
                                            ``vllm:kv_cache_usage_perc`` (vLLM before 0.10)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORDS = ["Hello", " from", " the", " fake", " vLLM", " server", "."]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def switches(model: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    try:
        with open(os.path.join(model, "fake_vllm.json"), encoding="utf-8") as fh:
            found.update(json.load(fh))
    except (OSError, ValueError):
        pass
    for key in ("exit_code", "crash_after", "load_seconds", "legacy_metrics"):
        raw = os.environ.get("FAKE_" + key.upper())
        if raw:
            found[key] = float(raw) if key == "load_seconds" else int(raw)
    return found


class State:
    def __init__(self, served_name: str, api_key: str | None, faults: dict[str, Any]) -> None:
        self.served_name = served_name
        self.api_key = api_key
        self.faults = faults
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.generations = 0


def metrics_text(state: State) -> str:
    label = f'{{model_name="{state.served_name}"}}'
    kv = "vllm:gpu_cache_usage_perc" if state.faults.get("legacy_metrics") else "vllm:kv_cache_usage_perc"
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{label} {float(state.running)}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{label} 0.0",
        f"# TYPE {kv} gauge",
        f"{kv}{label} {min(1.0, state.generation_tokens / 1000):.4f}",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{label} {float(state.prompt_tokens)}",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{label} {float(state.generation_tokens)}",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 1.0',
    ]
    return "\n".join(lines) + "\n"


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log("INFO: " + format % args)

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, json.dumps(payload).encode())

        def _authorized(self) -> bool:
            if state.api_key is None or self.headers.get("Authorization") == f"Bearer {state.api_key}":
                return True
            self._json(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"", "text/plain")
            elif self.path == "/metrics":
                self._send(200, metrics_text(state).encode(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                if self._authorized():
                    self._json(200, {"object": "list", "data": [
                        {"id": state.served_name, "object": "model", "created": int(time.time()),
                         "owned_by": "vllm", "root": "/models", "max_model_len": 4096}]})
            else:
                self._json(404, {"error": {"message": "Not Found", "type": "NotFoundError", "code": 404}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                self._json(404, {"error": {"message": "Not Found", "type": "NotFoundError", "code": 404}})
                return
            if not self._authorized():
                return
            if body.get("model") not in (None, state.served_name):
                self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                           "type": "NotFoundError", "code": 404}})
                return
            self._generate(body, chat=self.path == "/v1/chat/completions")

        def _generate(self, body: dict[str, Any], chat: bool) -> None:
            tokens = WORDS[:max(1, min(len(WORDS), int(body.get("max_tokens") or len(WORDS))))]
            with state.lock:
                state.running += 1
                state.prompt_tokens += 5
            kind = "chat.completion" if chat else "text_completion"
            try:
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for token in tokens:
                        choice = {"index": 0, "delta": {"content": token}} if chat else {"index": 0, "text": token}
                        chunk = {"id": "cmpl-fake", "object": kind + ".chunk" if chat else kind,
                                 "model": state.served_name, "choices": [choice]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.close_connection = True
                else:
                    text = "".join(tokens)
                    choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                               "finish_reason": "length"} if chat else
                              {"index": 0, "text": text, "finish_reason": "length"})
                    self._json(200, {"id": "cmpl-fake", "object": kind, "model": state.served_name,
                                     "choices": [choice], "usage": {"prompt_tokens": 5,
                                                                    "completion_tokens": len(tokens),
                                                                    "total_tokens": 5 + len(tokens)}})
            finally:
                with state.lock:
                    state.running -= 1
                    state.generation_tokens += len(tokens)
                    state.generations += 1
                    done = state.generations
            crash_after = state.faults.get("crash_after")
            if crash_after and done >= int(crash_after):
                log(f"ERROR: EngineCore died after {done} requests (fake crash)")
                os._exit(3)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model_positional", nargs="?")
    parser.add_argument("--model")
    parser.add_argument("--served-model-name")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key")
    args, unknown = parser.parse_known_args(argv)
    model = args.model or args.model_positional or "/models"
    faults = switches(model)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 in a container ignores it otherwise
    log(f"INFO: vLLM API server version 0.0.0-fake; model={model} args={sys.argv[1:]}")
    if "exit_code" in faults:
        log("ERROR: CUDA out of memory while loading the model (fake failure)")
        return int(faults["exit_code"])
    deadline = time.monotonic() + float(faults.get("load_seconds", 0))
    while time.monotonic() < deadline:
        log("INFO: Loading model weights...")
        time.sleep(0.2)
    state = State(args.served_model_name or model, args.api_key or os.environ.get("VLLM_API_KEY"), faults)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    log(f"INFO: Started server process; ignored flags: {' '.join(unknown)}")
    log(f"INFO: Uvicorn running on http://{args.host}:{args.port}")
    try:
        server.serve_forever(poll_interval=0.1)
    except SystemExit:
        log("INFO: Shutting down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
