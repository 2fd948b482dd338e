"""``make run``: the product on its embedded default, from one command.

Starts the daemon (or finds the one running), waits for the default model to be ready, prints the
``/v1`` URL with a curl example, then opens the desktop app when there is a display. Without a
display the daemon runs in the foreground until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.locations import default_home, read_admin_token, read_daemon_url
from daemon.api.models import ModelState

_LOGGER = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma-3-270m"
WAIT_READY_S = 600.0


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


async def _healthy(home: Path) -> bool:
    client = DaemonClient(read_daemon_url(home), "")
    try:
        return await client.healthz()
    finally:
        await client.close()


async def wait_for_model(home: Path, daemon: subprocess.Popen[bytes] | None) -> str | None:
    """Wait for the daemon, then for the default model; return the API URL (None on failure)."""
    deadline = time.monotonic() + 60
    while not await _healthy(home):
        if daemon is not None and daemon.poll() is not None:
            print(f"The daemon exited with {daemon.returncode}; see {home / 'logs' / 'daemon.log'}")
            return None
        if time.monotonic() > deadline:
            print("The daemon did not answer within 60 s.")
            return None
        await asyncio.sleep(0.3)
    token = read_admin_token(home) or ""
    client = DaemonClient(read_daemon_url(home), token)
    try:
        status = await client.status()
        model = next((m for m in status.models if m.id == DEFAULT_MODEL), None)
        if model is None:
            print("The demo model is not registered; add one with `mirbadllm ctl models add`.")
            return status.daemon.api_url
        if model.state != ModelState.READY:
            print(f"Starting {DEFAULT_MODEL} ...", flush=True)
            if model.state in (ModelState.STOPPED, ModelState.FAILED):
                await client.start_model(DEFAULT_MODEL)
            ends = time.monotonic() + WAIT_READY_S
            since = status.last_event_id
            while time.monotonic() < ends:
                current = (await client.get_model(DEFAULT_MODEL)).status
                if current.state == ModelState.READY:
                    break
                if current.state == ModelState.FAILED:
                    print(f"{DEFAULT_MODEL} failed to start: {current.error}")
                    return status.daemon.api_url
                page = await client.events(since, timeout=5)
                since = page.last_id
        return status.daemon.api_url
    except DaemonError as exc:
        print(f"error: {exc.message}")
        return None
    finally:
        await client.close()


def print_ready(api_url: str) -> None:
    print(f"""
MirbadLLM is serving {DEFAULT_MODEL} at {api_url}

  curl {api_url}/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{DEFAULT_MODEL}", "messages": [{{"role": "user", "content": "Hello!"}}]}}'

Any OpenAI client works: base_url="{api_url}", api_key="unused" (unless keys are required).
""", flush=True)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    home = default_home()
    daemon = None
    if not asyncio.run(_healthy(home)):
        daemon = subprocess.Popen([sys.executable, "-m", "mirbadllm", "daemon", "--home", str(home)],
                                  start_new_session=has_display())
    api_url = asyncio.run(wait_for_model(home, daemon))
    if api_url:
        print_ready(api_url)
    gui = has_display() and importlib.util.find_spec("PySide6") is not None
    if gui:
        print("Opening the MirbadLLM app (the daemon keeps serving after you quit it).")
        return subprocess.call([sys.executable, "-m", "mirbadllm", "--home", str(home)])
    print("No display found: running the daemon alone. Ctrl-C stops it (models keep running).")
    if daemon is None:
        return 0
    try:
        return daemon.wait()
    except KeyboardInterrupt:
        daemon.terminate()
        return daemon.wait()


if __name__ == "__main__":
    sys.exit(main())
