"""What tracing costs the /v1 router: part 2 of router_overhead.py (the fast fake runtime, direct
and routed requests in sequential pairs) with tracing off and with it on, every request sampled
and exported over OTLP/HTTP to a collector this script runs. Daemons alternate off/on per round.

    .venv/bin/python bench/tracing_overhead.py [--rounds N] [--proxy-requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from _harness import (
    BenchDaemon,
    _spawn_daemon,
    ensure_ready,
    free_port,
    read_admin_token,
)
from aiohttp import web
from router_overhead import TOKENS, proxy_cost

from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes


class Collector:
    def __init__(self) -> None:
        self.spans = 0

    async def traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.spans += sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")


async def start(fake: Path, tracing_endpoint: str | None) -> BenchDaemon:
    home = Path(tempfile.mkdtemp(prefix="mirbadllm-bench-"))
    if tracing_endpoint is not None:
        (home / "config.toml").write_text(f'[tracing]\nenabled = true\nendpoint = "{tracing_endpoint}"\n')
    port = free_port()
    argv = [sys.executable, "-m", "mirbadllm", "daemon", "--home", str(home), "--port",
            str(port), "--llama-server", str(fake), "--no-demo"]
    proc = _spawn_daemon(argv, home)
    for _ in range(600):
        token = read_admin_token(home)
        if token:
            client = DaemonClient(f"http://127.0.0.1:{port}", token)
            if await client.healthz():
                d = BenchDaemon(proc, home, port, client)
                model_file = home / "fake.gguf"
                model_file.write_bytes(gguf_bytes())
                await ensure_ready(d, ModelDefinition(id="fake", served_name="fake", model_path=str(model_file)),
                                   "fake")
                return d
            await client.close()
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.2)
    raise SystemExit(f"daemon did not start; see {home / 'bench-daemon.log'}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--proxy-requests", type=int, default=300)
    args = parser.parse_args()

    collector = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", collector.traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    endpoint = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
    fake = write_fake_runtime(Path(tempfile.mkdtemp()), token_delay_s=0, tokens=TOKENS)
    print("Tracing off and on: fast fake upstream (no token delay), sequential pairs")
    try:
        for r in range(args.rounds):
            for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                d = await start(fake, endpoint if name == "on" else None)
                try:
                    result = await proxy_cost(d, "fake", args.proxy_requests)
                finally:
                    await d.stop()
                print(f"  tracing {name:3}: added latency p50 {result['added_p50_ms']:.2f} ms, "
                      f"p99 {result['added_p99_ms']:.2f} ms; daemon CPU per SSE event "
                      f"{result['cpu_us_per_event']:.1f} µs")
        print(f"  spans the collector received: {collector.spans}")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
