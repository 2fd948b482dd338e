"""The real daemon for the app's tests: built from its composition root in a temporary home, on a
loopback port, in a thread with its own event loop (as in its own process: the test's qasync loop
neither blocks it nor runs its tasks). No local agent: a test that needs models uses the daemon
harness (``tests/daemon/harness.py``); this is for what the daemon answers by itself (keys,
settings, the audit log, saved chats)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from daemon.config import DaemonConfig
from daemon.deps import build_deps
from daemon.nodes.monitor import NodePolicy
from daemon.paths import DaemonPaths
from daemon.server import start_server

_LOGGER = logging.getLogger(__name__)


@contextmanager
def daemon_in_thread(home: Path) -> Iterator[tuple[str, str]]:
    """``(url, admin token)`` of a real daemon serving until the block ends."""
    up: concurrent.futures.Future[tuple[str, str]] = concurrent.futures.Future()
    held: dict[str, object] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        held["loop"], held["stop"] = asyncio.get_running_loop(), stop
        config = DaemonConfig(port=0, ollama_port=None, local_agent=False, seed_demo_model=False,
                              nodes=NodePolicy(discovery=False))
        daemon = build_deps(config, DaemonPaths(home))
        runner = await start_server(daemon)
        try:
            up.set_result((f"http://127.0.0.1:{daemon.config.port}", daemon.admin_token))
            await stop.wait()
        finally:
            await runner.cleanup()

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=asyncio.DefaultEventLoopPolicy().new_event_loop) as runner:
                runner.run(serve())
        except BaseException as exc:
            if not up.done():
                up.set_exception(exc)
            raise

    thread = threading.Thread(target=run, name="real-daemon", daemon=True)
    thread.start()
    try:
        yield up.result(timeout=60)
    finally:
        loop, stop = held.get("loop"), held.get("stop")
        if isinstance(loop, asyncio.AbstractEventLoop) and isinstance(stop, asyncio.Event):
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)
