"""``mirbadllm ctl services``: a node's own OS services (systemd, launchd, Windows services).

    mirbadllm ctl services NODE [list] [--all]
    mirbadllm ctl services NODE start|stop|restart NAME [--confirm NAME]

NODE is a node's name, id or id prefix (``local``: this machine). ``list`` shows the whitelisted
services (``--all``: every one, with why a system service is not manageable). A protected service
(Docker, the NVIDIA persistence daemon, ...) acts only with ``--confirm`` and its name typed again.
"""

from __future__ import annotations

import argparse
from typing import Any

from daemon.api.client import DaemonClient
from daemon.api.services import SERVICE_ACTIONS, ServiceInfo
from mirbadllm.ctl_nodes import resolve_id


def add_parser(groups: Any) -> None:
    services = groups.add_parser("services", help="a node's OS services: list, start, stop, restart")
    services.add_argument("node", help="name, id or id prefix of the node (`local`: this machine)")
    services.add_argument("action", nargs="?", default="list", choices=("list", *SERVICE_ACTIONS))
    services.add_argument("name", nargs="?", help="the service (for start, stop, restart)")
    services.add_argument("--confirm", metavar="NAME", help="the service's name again: a protected one needs it")
    services.add_argument("--all", action="store_true", help="every service, not only the whitelisted ones")


def fmt_service(info: ServiceInfo) -> str:
    if info.denied_by is not None:
        policy = f"system, not manageable ({info.denied_by})"
    elif not info.whitelisted:
        policy = "not whitelisted"
    else:
        policy = "protected: --confirm NAME" if info.protected else "manageable"
    pid = f"  pid {info.pid}" if info.pid else ""
    return f"{info.name:<36} {info.state.value:<9} {policy}{pid}"


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    node = await resolve_id(client, args.node)
    if args.action == "list":
        listing = await client.list_services(node, every=args.all)
        if listing.error:
            print(f"note: {listing.error}")
        if not listing.services:
            print(f"{listing.manager}: no service" + ("" if args.all else " is whitelisted on this node"))
        for info in listing.services:
            print(fmt_service(info))
        return 0
    if not args.name:
        print(f"{args.action} needs the service's NAME")
        return 2
    result = await client.service_action(node, args.name, args.action, args.confirm)
    print(f"{result.action} {result.service.name}: {result.service.state.value}")
    return 0
