"""``mirbadllm ctl daemon stop [--stop-models]``: end the running daemon and wait until it is gone.

The daemon answers ``POST /api/shutdown`` with its process id, then closes its listener and exits;
this waits until that process has exited (not only until the port is closed), so a following
``mirbadllm daemon`` never finds the old one still holding the port or the home.
"""

from __future__ import annotations

import argparse
from typing import Any

from app.bootstrap import wait_gone
from daemon.api.client import DaemonClient, DaemonError

STOP_WAIT_S = 120.0  # closing waits for open requests (long-polls end within a minute)


def add_parser(groups: Any) -> None:
    daemon = groups.add_parser("daemon", help="the daemon process: stop")
    actions = daemon.add_subparsers(dest="action", required=True)
    stop = actions.add_parser("stop", help="stop the daemon; its models keep running and are adopted next time")
    stop.add_argument("--stop-models", action="store_true", help="stop every model first")
    stop.add_argument("--timeout", type=float, default=STOP_WAIT_S, help="seconds to wait for it to exit")


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if not await client.healthz():
        raise DaemonError(0, "unreachable", f"no daemon answers at {client.base_url}: it is not running")
    answer = await client.shutdown(stop_models=args.stop_models)
    pid = answer.get("pid")
    stopped = answer.get("stopped_models") or []
    if stopped:
        print(f"stopped models: {', '.join(stopped)}")
    print(f"stopping the daemon (pid {pid})…", flush=True)
    if not await wait_gone(client, pid if isinstance(pid, int) else None, args.timeout):
        print(f"error: the daemon (pid {pid}) is still running after {args.timeout:.0f} s", flush=True)
        return 1
    kept = "" if args.stop_models else "; running models keep running and are adopted at its next start"
    print(f"the daemon has stopped{kept}")
    return 0
