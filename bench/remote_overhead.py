"""What a remote node costs: the same streamed requests sent straight to the runtime on the node,
and through the daemon and the node's agent (mutual TLS over a veth), interleaved.

The agent runs in its own network namespace with its own address, like a machine on the LAN. The
direct client runs inside that namespace (a worker this script starts there and drives over a
pipe), since the runtime listens on the node's loopback only; the routed client runs here and
goes daemon → mTLS (pooled, kept alive) → agent → runtime. Both measure at the client. Printed:
TTFT p50 of each path and their difference, and the tokens/s ratio (per request, after the
first token). Targets: TTFT delta ≤ 3 ms with warm connections, tokens/s ratio ≥ 0.97.

    .venv/bin/python bench/remote_overhead.py [--requests N] [--token-delay S] [--tokens N]
    .venv/bin/python bench/remote_overhead.py --real        # llama-server + Gemma 3 270M

Needs root for the namespace; without it the agent runs on loopback (and says so).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from _harness import ROOT, median, percentile, start_daemon, stream_chat

sys.path.insert(0, str(ROOT))
os.environ["MIRBADLLM_NO_MDNS"] = "1"  # nothing on the real network; we pair by address
from daemon.api.models import ModelDefinition, ModelState
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes
from tests.fleet.agents import kill_runtimes, spawn_agent
from tests.fleet.netns import NamespaceUnavailable, create_namespace

PROMPT = "Tell a short story about a lighthouse keeper."


async def direct_worker(base: str, key: str, model: str, tokens: int) -> None:
    """Inside the node's namespace: one timed request per 'go' line on stdin, one JSON line out."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        while line := await reader.readline():
            r = await stream_chat(session, base, headers, model, f"{PROMPT} ({line.decode().strip()})", tokens)
            print(json.dumps({"ttft_s": r.ttft_s, "total_s": r.total_s, "tokens": r.tokens}), flush=True)


class Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def request(self, tag: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{tag}\n".encode())
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), 600)
        if not line:
            raise SystemExit("the direct worker died; run with a smaller --requests or look at its stderr")
        return dict(json.loads(line))


def tokens_per_s(tokens: int, ttft_s: float, total_s: float) -> float:
    return tokens / max(total_s - ttft_s, 1e-9)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60, help="timed pairs (direct + routed)")
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--token-delay", type=float, default=0.005, help="fake runtime: seconds per token")
    parser.add_argument("--real", action="store_true", help="llama-server + Gemma 3 270M instead of the fake")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="llama-server threads (default: all cores but one; on one machine the daemon, "
                             "the agent and both clients share the node's cores, which a real LAN node does not)")
    parser.add_argument("--direct-worker", nargs=4, metavar=("BASE", "KEY", "MODEL", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.direct_worker:
        base, key, model, tokens = args.direct_worker
        await direct_worker(base, key, model, int(tokens))
        return

    work = Path(tempfile.mkdtemp(prefix="mirbadllm-remote-bench-"))
    if args.real:
        from daemon.models.registry import assemble_demo_gguf

        model_path = await asyncio.get_running_loop().run_in_executor(None, assemble_demo_gguf, work / "models")
        if model_path is None:
            raise SystemExit("the Gemma demo package is not installed")
        runtime = None  # the agent finds the llama-server `make runtime` built
    else:
        model_path = work / "fake.gguf"
        model_path.write_bytes(gguf_bytes())
        runtime = write_fake_runtime(work / "bin", token_delay_s=args.token_delay, tokens=args.tokens)
    try:
        ns = create_namespace()
        host, prefix = ns.ns_ip, ns.exec_prefix()
        where = f"agent in network namespace {ns.name} at {ns.ns_ip}, over a veth"
    except NamespaceUnavailable as exc:
        ns, host, prefix = None, "127.0.0.1", []
        where = f"agent on loopback (no namespace: {exc})"
    daemon = await start_daemon("--no-local-agent", seed_demo=False)
    agent = None
    worker = None
    try:
        agent = await spawn_agent(work / "agent", name="bench-node", llama_server=runtime, host=host,
                                  port=9443 if ns else 0, netns=ns.name if ns else None, extra=["--no-mdns"])
        pairing = await agent.wait_event("pairing")
        node = await daemon.client.pair_node(agent.address, pairing["code"], pairing["fingerprint"])
        settings = {"ctx_size": 2048, "parallel": 1, "threads": args.threads} if args.real else {}
        await daemon.client.create_model(ModelDefinition.model_validate({
            "id": "remote", "served_name": "remote", "model_path": str(model_path), "node": node.id,
            "settings": settings, "startup_timeout_s": 300}))
        status = await daemon.client.start_model("remote", wait=True)
        if status.state != ModelState.READY:
            raise SystemExit(f"the model did not start on the node: {status.error}")
        record = next(r for r in json.loads((work / "agent" / "processes.json").read_text())["processes"])
        worker = Worker(await asyncio.create_subprocess_exec(
            *prefix, sys.executable, str(Path(__file__).resolve()), "--direct-worker",
            f"http://127.0.0.1:{record['port']}", record["api_key"], "remote", str(args.tokens),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=str(ROOT)))
        print(f"remote_overhead: {where}; "
              f"{f'llama-server ({args.threads} threads) + Gemma 3 270M' if args.real else f'fake runtime, {args.token_delay * 1000:g} ms/token'}, "
              f"{args.tokens} tokens, {args.requests} interleaved pairs after {args.warmup} warm-up pairs")
        samples: dict[str, list[dict[str, float]]] = {"direct": [], "routed": []}
        routed = f"http://127.0.0.1:{daemon.port}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            async def via_daemon(tag: str) -> dict[str, float]:
                r = await stream_chat(session, routed, {}, "remote", f"{PROMPT} ({tag})", args.tokens)
                return {"ttft_s": r.ttft_s, "total_s": r.total_s, "tokens": r.tokens}

            for i in range(args.warmup + args.requests):
                pair = [("direct", worker.request), ("routed", via_daemon)]
                for name, call in (pair if i % 2 == 0 else pair[::-1]):
                    result = await call(f"{name}-{i}")
                    if i >= args.warmup:
                        samples[name].append(result)
        report(samples)
    finally:
        if worker is not None and worker.process.returncode is None:
            worker.process.kill()
            await worker.process.wait()
        pids = agent.runtime_pids() if agent is not None else []
        await daemon.stop()
        if agent is not None:
            await agent.stop()
        kill_runtimes(pids)
        if ns is not None:
            ns.destroy()
        shutil.rmtree(work, ignore_errors=True)  # the real model is a 250 MB copy


def report(samples: dict[str, list[dict[str, float]]]) -> None:
    ttft = {k: [s["ttft_s"] * 1000 for s in v] for k, v in samples.items()}
    tps = {k: [tokens_per_s(int(s["tokens"]), s["ttft_s"], s["total_s"]) for s in v] for k, v in samples.items()}
    delta = median(ttft["routed"]) - median(ttft["direct"])
    ratio = median(tps["routed"]) / median(tps["direct"])
    print(f"  TTFT p50: direct {median(ttft['direct']):.2f} ms, routed {median(ttft['routed']):.2f} ms "
          f"-> delta {delta:+.2f} ms (target <= 3 ms)   [p90 {percentile(ttft['direct'], 90):.2f} / "
          f"{percentile(ttft['routed'], 90):.2f} ms]")
    print(f"  tokens/s p50: direct {median(tps['direct']):.1f}, routed {median(tps['routed']):.1f} "
          f"-> ratio {ratio:.3f} (target >= 0.97)")


if __name__ == "__main__":
    started = time.monotonic()
    asyncio.run(main())
    print(f"  ({time.monotonic() - started:.0f} s)")
