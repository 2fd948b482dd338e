"""``mirbadllm daemon``: parse the command line, then run the daemon until SIGINT / SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable
from logging.handlers import RotatingFileHandler
from pathlib import Path

from core.limits import raise_open_files_limit
from daemon.api.locations import default_home
from daemon.config import load_config
from daemon.deps import DaemonDeps, build_deps
from daemon.paths import DaemonPaths
from daemon.server import start_server

_LOGGER = logging.getLogger(__name__)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbadllm daemon", description=__doc__)
    parser.add_argument("--home", type=Path, default=None, help="data directory (default: MIRBADLLM_HOME "
                        "or the platform's user data directory)")
    parser.add_argument("--host", default=None, help="address of /v1 and /api (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port of /v1 and /api (default 8484)")
    parser.add_argument("--ollama-port", type=int, default=None,
                        help="port of the Ollama API (default 11434; 0: off; off too when taken)")
    parser.add_argument("--no-local-agent", action="store_true", help="run as a master only")
    parser.add_argument("--llama-server", default=None, help="llama-server binary for the local agent")
    parser.add_argument("--require-keys", action="store_true", default=None,
                        help="require API keys on /v1 even on loopback")
    parser.add_argument("--no-demo", action="store_true", help="do not register the demo model on first run")
    parser.add_argument("--telemetry-interval", type=float, default=None, help="seconds between samples")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def setup_logging(paths: DaemonPaths, verbose: bool) -> None:
    paths.logs.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(fmt)
    file = RotatingFileHandler(paths.logs / "daemon.log", maxBytes=5_000_000, backupCount=3)
    file.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [stream, file]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def stop_signal_names(platform: str = sys.platform) -> list[str]:
    """The signals that stop the daemon: Ctrl-C and SIGTERM, plus Ctrl-Break on Windows."""
    return ["SIGINT", "SIGTERM", "SIGBREAK"] if platform == "win32" else ["SIGINT", "SIGTERM"]


def install_stop_handlers(loop: asyncio.AbstractEventLoop, stop: Callable[[], None],
                          platform: str = sys.platform,
                          set_handler: Callable[..., object] = signal.signal) -> str:
    """Call ``stop`` on the loop when a stop signal arrives; says which mechanism took them.

    Windows' proactor loop has no ``add_signal_handler`` (NotImplementedError), so there a plain
    ``signal.signal`` handler hands the stop to the loop thread-safely; the loop's wakeup fd makes
    it run at once, and Ctrl-C then stops the daemon as SIGTERM does instead of a KeyboardInterrupt.
    """
    sigs = [getattr(signal, name) for name in stop_signal_names(platform) if hasattr(signal, name)]
    try:
        for sig in sigs:
            loop.add_signal_handler(sig, stop)
        return "loop"
    except NotImplementedError:
        for sig in sigs:
            set_handler(sig, lambda _signum, _frame: loop.call_soon_threadsafe(stop))
        return "signal"


def settle_collector() -> None:
    """Once the daemon serves, its start-up objects (modules, routes, schemas: some 90,000, all kept
    for good) leave the garbage collector's full walks (``gc.freeze``). Under many streams a full
    collection comes every few seconds and stalls the whole loop, the admin API's answers with it; it
    now walks only the requests in flight: 7-30 ms of CPU at 256 streams instead of 100-170 (with the
    router leaving no cycles behind a request). The thresholds stay CPython's: full collections ten
    times rarer let cycles pile up (+150 MiB a minute at 256 streams when requests left them) and then
    stall the loop for a third of a second."""
    gc.collect()
    gc.freeze()


async def serve(daemon: DaemonDeps) -> None:
    try:
        runner = await start_server(daemon)
    except OSError as exc:
        raise SystemExit(f"cannot listen on {daemon.config.bind_host}:{daemon.config.port}: {exc}. "
                         "Is another daemon running? Try --port.") from exc
    _LOGGER.info("MirbadLLM daemon listening: %s (admin token in %s; event loop %s)", daemon.listener.info().api_url,
                 daemon.paths.admin_token, type(asyncio.get_running_loop()).__module__.split(".")[0])
    settle_collector()
    stop = daemon.shutdown_requested  # also set by POST /api/shutdown (`mirbadllm ctl daemon stop`)
    install_stop_handlers(asyncio.get_running_loop(), stop.set)
    await stop.wait()
    _LOGGER.info("shutting down (models keep running)")
    await daemon.events.close()  # the app's long-poll answers now instead of holding the stop for its timeout
    await runner.cleanup()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    paths = DaemonPaths((args.home or default_home()).expanduser().resolve())
    paths.ensure()
    setup_logging(paths, args.verbose)
    raise_open_files_limit()  # a connection per client, per runtime, per idle keep-alive
    config = load_config(paths.config, host=args.host, port=args.port, ollama_port=args.ollama_port,
                         llama_server=args.llama_server,
                         require_api_keys=args.require_keys,
                         local_agent=False if args.no_local_agent else None,
                         seed_demo_model=False if args.no_demo else None,
                         telemetry_interval_s=args.telemetry_interval,
                         history_interval_s=args.telemetry_interval)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(serve(build_deps(config, paths)))
    return 0


def loop_factory(platform: str = sys.platform) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (POSIX only; the /v1 router forwards each chunk
    with less CPU on it). None: asyncio's own loop (Windows, or uvloop missing)."""
    if platform == "win32":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
