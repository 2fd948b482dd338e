"""``mirbadllm ctl audit``: the daemon's audit log, newest first.

    mirbadllm ctl audit [--action A] [--subject S] [--actor WHO] [--since 1h] [--until 2026-12-01]
                        [--limit N] [--json]

``--action model`` lists every ``model.*``; ``--since`` / ``--until`` take an age (``90s``, ``15m``,
``1h``, ``2d``, ``1w``) or a date and time (``2026-12-01``, ``2026-12-01T14:30``, local time). The
table shows when, who (app, ctl, admin token, system), the action, its subject and what changed
(``field: old → new``); ``--json`` prints the entries with their full before and after.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import datetime
from typing import Any

from daemon.api.audit import MAX_LIMIT, AuditEntry, short, summary
from daemon.api.client import DaemonClient

_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_ENTRIES = 100_000


def parse_when(text: str, now: float | None = None) -> float:
    """An age (``1h``: that long ago) or a local date/time, as Unix time."""
    value = text.strip().lower()
    match = _AGE.fullmatch(value)
    if match:
        return (now if now is not None else time.time()) - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"'{text}' is neither an age (90s, 15m, 1h, 2d, 1w) nor a date (2026-12-01[T14:30])") from exc


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_ENTRIES:
        raise argparse.ArgumentTypeError(f"--limit is 1 to {MAX_ENTRIES}")
    return value


def add_parser(groups: Any) -> None:
    audit = groups.add_parser("audit", help="who changed what, newest first")
    audit.add_argument("--action", help="an action (model.update) or a group (model)")
    audit.add_argument("--subject", help="a model, key or node id")
    audit.add_argument("--actor", help="app, ctl, 'admin token' or system")
    audit.add_argument("--since", type=parse_when, help="an age (1h, 2d) or a date")
    audit.add_argument("--until", type=parse_when, help="an age (1h, 2d) or a date")
    audit.add_argument("--limit", type=_count, default=50, help="entries to show (default 50)")
    audit.add_argument("--json", action="store_true", help="the entries as JSON, with before and after")


async def fetch(client: DaemonClient, args: argparse.Namespace) -> list[AuditEntry]:
    """Up to ``args.limit`` entries, a page at a time."""
    entries: list[AuditEntry] = []
    before: int | None = None
    while len(entries) < args.limit:
        page = await client.audit(since=args.since, until=args.until, actor=args.actor, action=args.action,
                                  subject=args.subject, limit=min(MAX_LIMIT, args.limit - len(entries)),
                                  before=before)
        entries += page.entries
        if page.next_before is None:
            break
        before = page.next_before
    return entries


def table(entries: list[AuditEntry]) -> list[str]:
    rows = [(datetime.fromtimestamp(e.ts).strftime("%Y-%m-%d %H:%M:%S"), e.actor, e.action,
             short(e.subject, 24) if e.subject else "-", summary(e)) for e in entries]
    head = ("TIME", "WHO", "ACTION", "SUBJECT", "WHAT CHANGED")
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(4)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4]
            for row in [head, *rows]]


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    entries = await fetch(client, args)
    if args.json:
        print(json.dumps([e.model_dump(mode="json") for e in entries], indent=2, ensure_ascii=False))
    elif not entries:
        print("no audit entries" + (" match" if any((args.action, args.subject, args.actor, args.since,
                                                     args.until)) else ""))
    else:
        for line in table(entries):
            print(line.rstrip())
    return 0
