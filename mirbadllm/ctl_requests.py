"""``mirbadllm ctl requests``: what happened to a /v1 request, from the daemon's access log.

    mirbadllm ctl requests list [--model M] [--key NAME|ID] [--status 404|5xx] [--slower-than MS]
                                [--limit N] [--json]
    mirbadllm ctl requests show ID [--json]

``ID`` is the ``X-Request-Id`` header of the /v1 answer (also the ``request_id`` of an error body).
``show`` says which model was asked for and which answered (a fallback, when one did), the node
by name, the status, the time queued, to the first token and in all, the tokens, and why it
failed. The filters are the daemon's (``daemon.api.access_log``); a key is named or given by id.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from datetime import datetime
from typing import Any

from daemon.api.access_log import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    STATUS_PATTERN,
    millis,
    served_by,
    status_text,
    tokens,
)
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import RequestRecord
from mirbadllm.ctl_keys import key_id

_LOGGER = logging.getLogger(__name__)
_ERROR_CODE = re.compile(r"^([a-z][a-z0-9_]*): (.*)$", re.DOTALL)  # "model_not_found: The model ..."


def _status(text: str) -> str:
    value = text.strip().lower()
    if not re.fullmatch(STATUS_PATTERN, value):
        raise argparse.ArgumentTypeError(f"'{text}' is neither a status (404) nor a class of them (5xx)")
    return value


def _ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of milliseconds")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"--limit is 1 to {MAX_LIMIT}")
    return int(text)


def add_parser(groups: Any) -> None:
    requests = groups.add_parser("requests", help="what happened to a /v1 request (the access log)")
    actions = requests.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="recent /v1 requests, newest first")
    listing.add_argument("--model", help="a model id: asked for, or the fallback that answered")
    listing.add_argument("--key", help="an API key's name or id (`ctl keys list`)")
    listing.add_argument("--status", type=_status, help="a status (429) or a class (4xx, 5xx)")
    listing.add_argument("--slower-than", type=_ms, dest="slower_than", metavar="MS",
                         help="only those that took longer than this, in milliseconds")
    listing.add_argument("--limit", type=_count, default=50, help="how many (default 50)")
    listing.add_argument("--json", action="store_true", help="the rows as JSON")
    show = actions.add_parser("show", help="one request in full, by its X-Request-Id")
    show.add_argument("id", help="the X-Request-Id of the /v1 answer")
    show.add_argument("--json", action="store_true", help="the row as JSON")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _model(row: RequestRecord) -> str:
    if row.model is None:
        return "-"
    return f"{row.model} -> {row.answered_by}" if row.answered_by else row.model


def _node(row: RequestRecord) -> str:
    return row.node_name or (row.node[:12] if row.node else "-")


def failure(row: RequestRecord) -> tuple[str, str] | None:
    """What went wrong, as (code, reason); the code is '' when the reason names none (a retry's
    story, a runtime's own answer). None when nothing did."""
    if not row.error:
        return None
    match = _ERROR_CODE.match(row.error)
    return (match.group(1), match.group(2)) if match else ("", row.error)


def table(rows: list[RequestRecord]) -> list[str]:
    def why(row: RequestRecord) -> str:
        found = failure(row)
        return "" if found is None else (found[0] or found[1])[:60]

    cells = [(_when(r.ts), r.id, str(r.status), _model(r), _node(r), millis(r.total_ms), millis(r.ttft_ms),
              tokens(r), why(r)) for r in rows]
    head = ("TIME", "ID", "STATUS", "MODEL", "NODE", "TOTAL", "TTFT", "TOKENS", "WHY")
    widths = [max(len(row[i]) for row in [head, *cells]) for i in range(len(head) - 1)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
            for row in [head, *cells]]


def details(row: RequestRecord, key_name: str | None = None) -> list[str]:
    """One request in full, a field a line."""
    served = served_by(row)
    model = "- (refused before a model was chosen)" if row.model is None else row.model
    if row.answered_by:
        model += f" (asked); answered by the fallback {row.answered_by}"
    lines = [("request", row.id), ("time", f"{_when(row.ts)}  {row.path}"), ("model", model),
             ("served by", served or "-"),
             ("node", _node(row) if row.node else "- (no node ran it)"),
             ("key", "none" if row.key_id is None else f"{key_name} ({row.key_id})" if key_name else row.key_id),
             ("status", status_text(row.status)), ("queued", millis(row.queue_ms)),
             ("first token", millis(row.ttft_ms)), ("total", millis(row.total_ms)),
             ("tokens", "—" if tokens(row) == "—" else f"{tokens(row).replace(' + ', ' prompt + ')} completion")]
    found = failure(row)
    if found is not None:
        code, reason = found
        if row.status >= 400:
            lines += [("failure", code or status_text(row.status)), ("reason", reason)]
        else:  # answered, after a retry or by a fallback: what went wrong on the way
            lines += [("on the way", row.error or "")]
    width = max(len(name) for name, _ in lines)
    return [f"{name.ljust(width)}  {value}".rstrip() for name, value in lines]


async def _key_filter(client: DaemonClient, given: str | None) -> str | None:
    """The key's id; a name or id no key has now (a revoked key's id) is asked for as given."""
    if given is None:
        return None
    try:
        return await key_id(client, given)
    except DaemonError as exc:
        if exc.code != "key_not_found":
            raise
        return given


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "show":
        try:
            row = await client.request(args.id)
        except DaemonError as exc:
            if exc.code != "request_not_found":
                raise
            print(f"error: no /v1 request with id '{args.id}' in the daemon's access log (it keeps 30 days). "
                  "The id is the X-Request-Id header of the answer; `mirbadllm ctl requests list` shows "
                  "recent ones.", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(row.model_dump(mode="json"), indent=2, ensure_ascii=False))
            return 0
        names = {k.id: k.name for k in await client.list_keys()} if row.key_id else {}
        for line in details(row, names.get(row.key_id or "")):
            print(line)
        return 0
    rows = await client.requests(limit=args.limit or DEFAULT_LIMIT, model=args.model,
                                 key_id=await _key_filter(client, args.key), status=args.status,
                                 slower_than_ms=args.slower_than)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2, ensure_ascii=False))
    elif not rows:
        filtered = any(v is not None for v in (args.model, args.key, args.status, args.slower_than))
        print("no requests match" if filtered else "no /v1 requests yet")
    else:
        for line in table(rows):
            print(line.rstrip())
    return 0
