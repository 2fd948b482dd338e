"""``mirbadllm ctl chats``: the conversations saved by the Playground (``/api/conversations``).

    mirbadllm ctl chats list [--json]
    mirbadllm ctl chats show ID
    mirbadllm ctl chats rename ID TITLE
    mirbadllm ctl chats rm ID
    mirbadllm ctl chats export ID [--format md|json] [--out FILE]

``ID`` is a chat's id or the start of one (as ``list`` shows it); a start that fits two chats is
refused, naming them.
"""

from __future__ import annotations

import argparse
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.conversations import EXPORT_FORMATS, Conversation

_LOGGER = logging.getLogger(__name__)


def add_parser(groups: Any) -> None:
    chats = groups.add_parser("chats", help="the Playground's saved conversations")
    actions = chats.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="saved chats, the most recent first")
    listing.add_argument("--json", action="store_true")
    actions.add_parser("show", help="one chat, message by message").add_argument("id")
    rename = actions.add_parser("rename", help="give a chat a title")
    rename.add_argument("id")
    rename.add_argument("title")
    actions.add_parser("rm", help="delete a chat").add_argument("id")
    export = actions.add_parser("export", help="a chat as Markdown or JSON")
    export.add_argument("id")
    export.add_argument("--format", choices=EXPORT_FORMATS, default="md")
    export.add_argument("--out", type=Path, help="write it to FILE (default: print it)")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


async def resolve(client: DaemonClient, wanted: str) -> str:
    """The id of the chat ``wanted`` names: its id, or a start only one id has."""
    chats = await client.list_conversations()
    if any(c.id == wanted for c in chats):
        return wanted
    found = [c for c in chats if c.id.startswith(wanted)] if wanted else []
    if len(found) > 1:
        raise DaemonError(409, "ambiguous_id", f"'{wanted}' starts {len(found)} chats: "
                          + ", ".join(f"{c.id} ({c.title})" for c in found))
    if not found:
        raise DaemonError(404, "conversation_not_found", f"no saved chat '{wanted}' (`mirbadllm ctl chats list`)")
    return found[0].id


def _show(chat: Conversation) -> None:
    print(f"{chat.title}  ({chat.model or 'no model'}, {chat.message_count} messages, {_when(chat.created_at)})")
    if chat.system_prompt.strip():
        print(f"\n[system] {chat.system_prompt.strip()}")
    for message in chat.messages:
        who = "you" if message.role == "user" else message.model or message.role
        print(f"\n[{who}]")
        if message.images:
            print(f"(attached: {', '.join(message.images)})")
        if message.reasoning:
            print(f"(reasoning: {len(message.reasoning)} characters; `export` shows it)")
        print(message.content.strip())
        if message.error:
            print(f"(error: {message.error})")


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "list":
        chats = await client.list_conversations()
        if args.json:
            print(json.dumps([c.model_dump(mode="json") for c in chats], indent=2))
        elif not chats:
            print("no saved chats yet (the Playground saves each conversation)")
        for chat in [] if args.json else chats:
            print(f"{chat.id}  {_when(chat.updated_at)}  {chat.message_count:>4} msgs  "
                  f"{chat.model or '-':<20} {chat.title}")
        return 0
    chat_id = await resolve(client, args.id)
    if args.action == "show":
        _show(await client.get_conversation(chat_id))
    elif args.action == "rename":
        renamed = await client.rename_conversation(chat_id, args.title)
        print(f"renamed {renamed.id}: {renamed.title}")
    elif args.action == "rm":
        await client.delete_conversation(chat_id)
        print(f"deleted {chat_id}")
    else:
        text = await client.export_conversation(chat_id, "json" if args.format == "json" else "md")
        if args.out is None:
            print(text, end="")
        else:
            args.out.write_text(text, encoding="utf-8")
            print(f"wrote {args.out}")
    return 0
