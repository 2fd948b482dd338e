"""``mirbadllm ctl connect``: a tool's ready configuration for this daemon, as the Access page shows it.

    mirbadllm ctl connect                          the tools
    mirbadllm ctl connect TOOL [--model M] [--key-name NAME | --key SECRET] [--lan]

The configuration goes to stdout (``> file`` keeps just it); where it goes and what to do about the
key go to stderr. ``--key-name NAME`` fills in a new key by that name, created now, since a key's
secret is only shown when it is created; for a name already taken the placeholder stays and the note
says so. ``--lan``: the LAN URL, for a tool on another device.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from daemon.api.client import DaemonClient
from daemon.api.connect import (
    KEY_PLACEHOLDER,
    TOOLS,
    UnknownTool,
    config_for,
    connect_url,
    key_note,
    key_text,
    served_models,
)

_LOGGER = logging.getLogger(__name__)


def add_parser(groups: Any) -> None:
    connect = groups.add_parser("connect", help="a tool's configuration for /v1 (Continue, Zed, aider, ...)")
    connect.add_argument("tool", nargs="?", help="the tool (without it: the list)")
    connect.add_argument("--model", help="the served name to put in (default: the first a request can reach)")
    key = connect.add_mutually_exclusive_group()
    key.add_argument("--key-name", metavar="NAME", help="fill in a new API key by this name, created now")
    key.add_argument("--key", metavar="SECRET", help="fill in this key's secret")
    connect.add_argument("--lan", action="store_true", help="the LAN URL, for a tool on another device")


def tools_text() -> str:
    return "\n".join(f"{tool:<14} {entry.title}: {entry.about}" for tool, entry in TOOLS.items())


def without_daemon(args: argparse.Namespace) -> int | None:
    """The exit code when ``args`` needs no daemon (the list, an unknown tool); None when it does."""
    if not args.tool:
        print(tools_text())
        return 0
    if args.tool.strip().lower() not in TOOLS:
        print(f"error: no configuration for '{args.tool}'; the tools:\n{tools_text()}", file=sys.stderr)
        return 2
    return None


async def _secret(client: DaemonClient, name: str) -> tuple[str | None, str]:
    """The secret of a key created now as ``name``, and what to tell the person."""
    taken = next((k for k in await client.list_keys() if k.name.casefold() == name.strip().casefold()), None)
    if taken is not None:
        return None, (f"The key '{taken.name}' exists; its secret was shown once, when it was created: put it "
                      f"in place of {KEY_PLACEHOLDER}, or give a new name to create a key now.")
    created = await client.create_key(name)
    return created.key, f"Created the API key '{created.info.name}' ({created.info.id}): it is not shown again."


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    code = without_daemon(args)
    if code is not None:
        return code
    status = await client.status()
    try:
        url = connect_url(status.daemon, from_lan=args.lan)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    names = served_models(await client.list_models())
    if args.model and args.model not in names:
        print(f"error: no model is served as '{args.model}'; the served names: {', '.join(names) or 'none yet'}",
              file=sys.stderr)
        return 1
    secret, told = args.key, ""
    if args.key_name:
        secret, told = await _secret(client, args.key_name)
    key = key_text(secret, status.daemon.keys_required or args.lan)
    try:
        snippet = config_for(args.tool, url, key, args.model or (names[0] if names else ""))
    except UnknownTool as exc:  # without_daemon has checked: kept for a caller of run() alone
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(snippet.text, end="")
    for line in (f"{snippet.title}: {snippet.where_it_goes}", told, key_note(key)):
        if line:
            print(line, file=sys.stderr)
    return 0
