"""Shared pieces of the benchmarks: a daemon in a subprocess, and timed OpenAI-style requests."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.api.client import DaemonClient
from daemon.api.locations import read_admin_token
from daemon.api.models import ModelDefinition, ModelState


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-pct * len(ordered) // 100))))
    return ordered[rank - 1]


@dataclass
class BenchDaemon:
    process: subprocess.Popen[bytes]
    home: Path
    port: int
    client: DaemonClient

    @property
    def v1(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def runtime(self, model_id: str) -> tuple[str, str]:
        """(endpoint, instance key) of a local runtime, read from the agent's records."""
        data = json.loads((self.home / "agent" / "processes.json").read_text())
        record = next(r for r in data["processes"] if r["instance_id"] == model_id)
        return f"http://127.0.0.1:{record['port']}", record["api_key"]

    async def stop(self) -> None:
        for view in await self.client.list_models():
            if view.status.state != ModelState.STOPPED:
                await self.client.stop_model(view.definition.id)
        await self.client.close()
        self.process.terminate()
        self.process.wait(30)


def _spawn_daemon(argv: list[str], home: Path, root: Path) -> subprocess.Popen[bytes]:
    """The daemon process, its output in ``home/bench-daemon.log`` (a quick, blocking start)."""
    log = open(home / "bench-daemon.log", "wb")  # noqa: SIM115 - lives as long as the daemon
    return subprocess.Popen(argv, stdout=log, stderr=log, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})


async def start_daemon(*extra: str, seed_demo: bool = True, root: Path = ROOT, config: str = "") -> BenchDaemon:
    """A daemon on a free port with its own home; ``root``: the source tree it runs from (another
    tree, e.g. ``git archive HEAD~1 | tar -x -C /tmp/old``, puts an older daemon beside this one);
    ``config``: its ``config.toml``, if any."""
    home = Path(tempfile.mkdtemp(prefix="mirbadllm-bench-"))
    if config:
        (home / "config.toml").write_text(config)
    port = free_port()
    argv = [sys.executable, "-m", "mirbadllm", "daemon", "--home", str(home), "--port", str(port), *extra]
    if not seed_demo:
        argv.append("--no-demo")
    proc = _spawn_daemon(argv, home, root)
    deadline = time.monotonic() + 120
    token = None
    while time.monotonic() < deadline:
        token = read_admin_token(home)
        if token:
            client = DaemonClient(f"http://127.0.0.1:{port}", token)
            if await client.healthz():
                return BenchDaemon(proc, home, port, client)
            await client.close()
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.2)
    raise SystemExit(f"daemon did not start; see {home / 'bench-daemon.log'}")


async def start_fake_daemon(tokens: int, *, root: Path = ROOT, parallel: int | None = None,
                            max_queue: int | None = None) -> BenchDaemon:
    """A daemon whose one model, ``fake``, is the fake llama-server with no token delay (``tokens``
    per answer): the router's own cost stands out. ``parallel``/``max_queue``: its slots and queue."""
    from agent.api.llamacpp import LlamaCppSettings
    from tests.fakes import write_fake_runtime
    from tests.fakes.gguf_files import gguf_bytes

    fake = write_fake_runtime(Path(tempfile.mkdtemp()), token_delay_s=0, tokens=tokens)
    d = await start_daemon("--llama-server", str(fake), seed_demo=False, root=root)
    model_file = d.home / "fake.gguf"
    model_file.write_bytes(gguf_bytes())  # a tiny valid header: the agent refuses malformed ones
    definition = ModelDefinition(id="fake", served_name="fake", model_path=str(model_file))
    if parallel is not None:
        definition.settings = LlamaCppSettings(parallel=parallel)
    if max_queue is not None:
        definition.max_queue = max_queue
    await ensure_ready(d, definition, "fake")
    return d


async def ensure_ready(d: BenchDaemon, definition: ModelDefinition | None, model_id: str) -> None:
    if definition is not None:  # only what is set: a daemon from an older tree (--baseline) knows no newer field
        await d.client._call("POST", "/api/models", body=definition.model_dump(mode="json", exclude_defaults=True))
    status = await d.client.start_model(model_id, wait=True)
    if status.state != ModelState.READY:
        raise SystemExit(f"{model_id} did not become ready: {status.error}")


@dataclass
class StreamResult:
    ttft_s: float
    total_s: float
    tokens: int
    events: int


async def stream_chat(session: aiohttp.ClientSession, base: str, headers: dict[str, str], model: str,
                      prompt: str, max_tokens: int) -> StreamResult:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft = None
    events = tokens = 0
    async with session.post(f"{base}/v1/chat/completions", json=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{resp.status}: {await resp.text()}")
        # Read to the end, as the openai SDK does: the connection then goes back to the pool (one
        # left after [DONE] is closed, and a new one per request would be the bench's own cost).
        async for line in resp.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                events += line.startswith(b"data: ")
                continue
            events += 1
            chunk = json.loads(line[6:])
            if ttft is None and chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    total = time.perf_counter() - start
    return StreamResult(ttft if ttft is not None else total, total, tokens, events)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
