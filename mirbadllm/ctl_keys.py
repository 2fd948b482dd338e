"""``mirbadllm ctl keys``: API keys for ``/v1`` and their limits.

    mirbadllm ctl keys list
    mirbadllm ctl keys create NAME [--rpm N] [--tokens-per-day N]
    mirbadllm ctl keys limit NAME|ID [--rpm N|none] [--tokens-per-day N|none]
    mirbadllm ctl keys revoke NAME|ID

``limit`` changes only the limits it is given; ``none`` (or 0) removes one.
"""

from __future__ import annotations

import argparse
from typing import Any

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import ApiKeyInfo, ApiKeyLimits


def _limit(text: str) -> int | None:
    if text.strip().lower() in ("none", "off", "0"):
        return None
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("a limit is a positive number, or 'none'")
    return value


def _limit_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rpm", type=_limit, default=argparse.SUPPRESS, metavar="N|none",
                        help="requests per minute (a sliding 60-second window)")
    parser.add_argument("--tokens-per-day", type=_limit, default=argparse.SUPPRESS, metavar="N|none",
                        help="prompt plus completion tokens per UTC day")


def add_parser(groups: Any) -> None:
    keys = groups.add_parser("keys", help="API keys for /v1").add_subparsers(dest="action", required=True)
    keys.add_parser("list")
    create = keys.add_parser("create")
    create.add_argument("name")
    _limit_flags(create)
    limit = keys.add_parser("limit", help="set a key's requests per minute and tokens per day")
    limit.add_argument("id", metavar="NAME|ID", help="the key's name or id (`ctl keys list`)")
    _limit_flags(limit)
    revoke = keys.add_parser("revoke")
    revoke.add_argument("id", metavar="NAME|ID", help="the key's name or id (`ctl keys list`)")


def _given(args: argparse.Namespace) -> ApiKeyLimits:
    fields: dict[str, int | None] = {}
    if hasattr(args, "rpm"):
        fields["requests_per_minute"] = args.rpm
    if hasattr(args, "tokens_per_day"):
        fields["tokens_per_day"] = args.tokens_per_day
    return ApiKeyLimits(**fields)  # only the flags given are set: the rest stay as they are


def limits_text(info: ApiKeyInfo) -> str:
    rpm, day = info.limits.requests_per_minute, info.limits.tokens_per_day
    parts = [f"{info.requests_last_minute}/{rpm} rpm" if rpm else "",
             f"{info.tokens_today}/{day} tokens today (UTC)" if day else ""]
    return ", ".join(p for p in parts if p) or "no limits"


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "list":
        for key in await client.list_keys():
            print(f"{key.id}  {key.name:<20} {key.prefix}…  {limits_text(key)}")
    elif args.action == "create":
        created = await client.create_key(args.name)
        limits = _given(args)
        if limits.model_fields_set:
            await client.set_key_limits(created.info.id, limits)
        print(f"API key '{created.info.name}' ({created.info.id}). Copy it now, it is not shown again:")
        print(created.key)
    elif args.action == "limit":
        limits = _given(args)
        if not limits.model_fields_set:
            print("nothing to change: give --rpm and/or --tokens-per-day")
            return 2
        info = await client.set_key_limits(await key_id(client, args.id), limits)
        print(f"{info.id}  {info.name}: {limits_text(info)}")
    else:
        chosen = await key_id(client, args.id)
        await client.revoke_key(chosen)
        print(f"revoked {chosen}")
    return 0


async def key_id(client: DaemonClient, given: str) -> str:
    """The id of the key ``given`` names: its id, or its name (names are unique, case aside)."""
    keys = await client.list_keys()
    match = next((k for k in keys if k.id == given), None) or next(
        (k for k in keys if k.name.casefold() == given.casefold()), None)
    if match is None:
        there = ", ".join(f"{k.name} ({k.id})" for k in keys) or "none yet (ctl keys create NAME)"
        raise DaemonError(404, "key_not_found", f"no API key named or with id '{given}'; the keys: {there}")
    return match.id
