"""A real daemon in the test's event loop, with its real local agent child and a (fake) runtime."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition, ModelState, ModelStatus, RequestRecord
from daemon.config import DaemonConfig
from daemon.deps import DaemonDeps, build_deps
from daemon.paths import DaemonPaths
from daemon.server import start_server
from tests.fakes.ports import free_port_block

_LOGGER = logging.getLogger(__name__)


@dataclass
class RunningDaemon:
    daemon: DaemonDeps
    client: DaemonClient
    runner: web.AppRunner | None = None

    async def stop_server(self) -> None:
        """Stop the daemon as ``mirbadllm daemon stop`` does: its models keep running (the next
        daemon on this home adopts them), and the harness leaves them to it."""
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.daemon.config.port}"

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    async def logged_requests(self, count: int) -> list[RequestRecord]:
        """The access log, oldest first, once it holds ``count`` rows (a row is written as its handler
        finishes); what it holds after 10 s otherwise."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            rows = await self.client.requests(limit=1000)
            if len(rows) >= count or loop.time() > deadline:
                return sorted(rows, key=lambda r: r.ts)
            await asyncio.sleep(0.05)

    async def wait_state(self, model_id: str, *states: ModelState, timeout: float = 60) -> ModelStatus:
        """Wait on the daemon's event feed until the model is in one of ``states``."""
        since = 0
        import time

        deadline = time.monotonic() + timeout
        while True:
            status = (await self.client.get_model(model_id)).status
            if status.state in states:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{model_id} stayed {status.state.value} ({status.error}); wanted {states}")
            page = await self.client.events(since, timeout=min(left, 5))
            since = page.last_id


@asynccontextmanager
async def running_daemon(home: Path, llama_server: Path | str | None, **config: object) -> AsyncIterator[RunningDaemon]:
    # Runtimes on a block of their own: never 18080, where `make run` (or another test) may be.
    # The local agent listens about a second after its spawn: the link asks every 0.1 s rather than
    # on the default doubling schedule, which would first ask again at 1.4 s.
    values: dict[str, object] = {"port": 0, "seed_demo_model": False, "telemetry_interval_s": 0.5,
                                 "history_interval_s": 0.5, "llama_server": str(llama_server) if llama_server else None,
                                 "runtime_first_port": free_port_block(20), "local_agent_retry_max_s": 0.1,
                                 "ollama_port": None}  # off: the Ollama API's tests give it a free port
    values.update(config)
    daemon = build_deps(DaemonConfig.model_validate(values), DaemonPaths(home))
    runner = await start_server(daemon)
    client = DaemonClient(f"http://127.0.0.1:{daemon.config.port}", daemon.admin_token)
    running: RunningDaemon | None = None
    try:
        link = daemon.links.get("local")
        if link is not None:
            import asyncio

            await asyncio.wait_for(link.first_sync.wait(), 60)
        running = RunningDaemon(daemon, client, runner)
        yield running
    finally:
        if running is not None and running.runner is None:  # stopped by the test: its runtimes live on
            await client.close()
        else:
            for definition in daemon.registry.all():  # runtimes outlive the daemon by design: stop ours
                try:
                    await daemon.orchestrator.stop(definition.id)
                except Exception as exc:  # noqa: BLE001 - best effort at teardown
                    _LOGGER.warning("could not stop %s: %s", definition.id, exc)
            await client.close()
            await runner.cleanup()
            _kill_leftover_runtimes(home)


def _kill_leftover_runtimes(home: Path) -> None:
    """A runtime a stop did not reach (its node went away first, say) must not outlive the test and
    hold a port the next test's runtime expects: end what the local agent's records still list."""
    import json
    import os
    import signal

    import psutil

    try:
        records = json.loads((home / "agent" / "processes.json").read_text()).get("processes", [])
    except (OSError, ValueError):
        return
    for record in records:
        try:
            process = psutil.Process(int(record["pid"]))
            if abs(process.create_time() - float(record["create_time"])) < 1.0:
                _LOGGER.warning("killing leftover runtime %s (pid %d)", record.get("instance_id"), process.pid)
                if hasattr(os, "killpg"):
                    os.killpg(process.pid, signal.SIGKILL)  # the runtime leads its own session
                else:
                    process.kill()
        except (psutil.Error, KeyError, ValueError, OSError):
            continue


def model(model_id: str, path: str = "/models/fake.gguf", **fields: object) -> ModelDefinition:
    return ModelDefinition.model_validate({"id": model_id, "served_name": model_id, "model_path": path, **fields})
