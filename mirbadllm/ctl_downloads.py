"""``mirbadllm ctl downloads``: every transfer the daemon owns (``/api/transfers``), and its verbs.

    mirbadllm ctl downloads [list]     running, paused and finished ones: progress, speed, ETA, why one failed
    mirbadllm ctl downloads pause ID   stop a download or mirror push, keeping its partial file
    mirbadllm ctl downloads resume ID  go on from the partial file (an HTTP Range request; the node's part)
    mirbadllm ctl downloads cancel ID  stop it and delete its partial file
    mirbadllm ctl downloads retry ID   run a failed or cancelled download or mirror push again

Hub and URL downloads, Ollama, LM Studio and folder imports, and mirror pushes to a node are all
listed; downloads and mirror pushes pause (``daemon.sources.downloads``), imports only cancel. A refused verb exits 1 with the daemon's reason.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from agent.api.sources import TransferState
from daemon.api.client import DaemonClient
from daemon.api.sources import Transfer
from mirbadllm.ctl_disk import size_text

_LOGGER = logging.getLogger(__name__)
VERBS = ("pause", "resume", "cancel", "retry")


def add_parser(groups: Any) -> None:
    downloads = groups.add_parser("downloads", help="downloads, imports and mirror pushes: pause, resume, "
                                  "cancel, retry")
    actions = downloads.add_subparsers(dest="action")
    actions.add_parser("list", help="every transfer, the newest last")
    for verb in VERBS:
        actions.add_parser(verb, help=f"{verb} a transfer").add_argument("id", metavar="ID")


def duration_text(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_text(t: Transfer) -> str:
    """How far it got: bytes, share, speed and time left while it runs."""
    if t.bytes_total:
        text = f"{size_text(t.bytes_done)} of {size_text(t.bytes_total)} ({100 * t.bytes_done // t.bytes_total}%)"
    else:
        text = size_text(t.bytes_done) if t.bytes_done else ""
    if t.speed_bps:
        text += f"  {size_text(int(t.speed_bps))}/s"
    if t.eta_s is not None:
        text += f"  {duration_text(t.eta_s)} left"
    return text.strip()


def transfer_line(t: Transfer) -> str:
    where = t.node if t.kind != "mirror" else f"to {t.node}"
    line = f"{t.id:<6} {t.state.value:<9} {t.kind:<6} {t.label}  [{where}]"
    shown = progress_text(t)
    if shown:
        line += f"  {shown}"
    if t.state == TransferState.FAILED:
        line += f"\n       failed: {t.error or 'no reason given'} (`mirbadllm ctl downloads retry {t.id}`)"
    elif t.state == TransferState.DONE and t.registered:
        line += f"  -> {', '.join(t.registered)}"
    return line


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action in VERBS:
        verb = {"pause": client.pause_transfer, "resume": client.resume_transfer,
                "cancel": client.cancel_transfer, "retry": client.retry_transfer}[args.action]
        print(transfer_line(await verb(args.id)))
        return 0
    transfers = await client.transfers()
    if not transfers:
        print("no downloads yet: `mirbadllm ctl models pull REPO[:QUANT]` starts one")
        return 0
    for transfer in transfers:
        print(transfer_line(transfer))
    return 0
