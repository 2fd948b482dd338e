"""``mirbadllm ctl services``: a node's own OS services (systemd, launchd, Windows services).

    mirbadllm ctl services NODE [list] [--all]
    mirbadllm ctl services NODE start|stop|restart NAME [--confirm NAME]
    mirbadllm ctl services allow NAME [--node NODE] [--protected]
    mirbadllm ctl services disallow NAME [--node NODE]
    mirbadllm ctl services policy

NODE is a node's name, id or id prefix (``local``: this machine). ``list`` shows the whitelisted
services (``--all``: every one, with why a system service is not manageable). A protected service
(Docker, the NVIDIA persistence daemon, ...) acts only with ``--confirm`` and its name typed again.
``allow`` and ``disallow`` edit the daemon's whitelist (its ``services.json``, through
``/api/services/policy``): for every node, or one with ``--node``; a name on the deny list is
refused with the reason. ``policy`` prints the whitelist. (A node named allow, disallow or policy
is reached by its id.)
"""

from __future__ import annotations

import argparse
from typing import Any

from daemon.api.client import DaemonClient
from daemon.api.services import (
    SERVICE_ACTIONS,
    ServiceInfo,
    ServicesPolicy,
    normalise,
    with_allowed,
    without,
)
from mirbadllm.ctl_nodes import resolve_id

POLICY_COMMANDS = ("allow", "disallow", "policy")


def add_parser(groups: Any) -> None:
    services = groups.add_parser("services", help="a node's OS services: list, start, stop, restart")
    services.add_argument("node", help="name, id or id prefix of the node (`local`: this machine); "
                          "or allow|disallow|policy to edit the whitelist")
    services.add_argument("action", nargs="?", default="list",
                          help="list, start, stop, restart (after allow/disallow: the service's name)")
    services.add_argument("name", nargs="?", help="the service (for start, stop, restart)")
    services.add_argument("--confirm", metavar="NAME", help="the service's name again: a protected one needs it")
    services.add_argument("--all", action="store_true", help="every service, not only the whitelisted ones")
    services.add_argument("--node", dest="policy_node", metavar="NODE",
                          help="allow/disallow on this node only (default: every node)")
    services.add_argument("--protected", action="store_true",
                          help="allow: also protect it (its actions need the name typed)")


def fmt_service(info: ServiceInfo) -> str:
    if info.denied_by is not None:
        policy = f"system, not manageable ({info.denied_by})"
    elif not info.whitelisted:
        policy = "not whitelisted"
    else:
        policy = "protected: --confirm NAME" if info.protected else "manageable"
    pid = f"  pid {info.pid}" if info.pid else ""
    return f"{info.name:<36} {info.state.value:<9} {policy}{pid}"


def fmt_policy(policy: ServicesPolicy) -> list[str]:
    def block(allow: list[str], protected: list[str]) -> str:
        names = [f"{n} (protected)" if n in protected else n for n in allow]
        names += [f"{n} (protected only)" for n in protected if n not in allow]
        return ", ".join(names) or "none"

    lines = [f"every node: {block(policy.allow, policy.protected)}"]
    lines += [f"node {node}: {block(b.allow, b.protected)}" for node, b in sorted(policy.nodes.items())]
    return lines


async def _policy(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.node == "policy":
        policy = await client.services_policy()
        if policy.error:
            print(f"note: {policy.error}")
        for line in fmt_policy(policy):
            print(line)
        return 0
    name = args.action if args.action != "list" else None
    if not name or args.name:
        print(f"usage: mirbadllm ctl services {args.node} NAME [--node NODE]"
              + (" [--protected]" if args.node == "allow" else ""))
        return 2
    node = await resolve_id(client, args.policy_node) if args.policy_node else None
    where = f"on node {node}" if node else "on every node"
    policy = await client.services_policy(node)
    current = policy.names(node)
    if args.node == "allow":
        after = await client.set_services_policy(with_allowed(current, name, args.protected), node)
        print(f"allowed {normalise(name)} {where}" + (" (protected)" if args.protected else ""))
    else:
        if normalise(name) not in {normalise(n) for n in (*current.allow, *current.protected)}:
            everywhere = node is not None and normalise(name) in {normalise(n) for n in policy.allow}
            print(f"{normalise(name)} is not on the daemon's whitelist {where}"
                  + (" (try --node NODE)" if node is None else
                     " (it is on every node's: disallow it without --node)" if everywhere else ""))
            return 1
        after = await client.set_services_policy(without(current, name), node)
        print(f"removed {normalise(name)} from the whitelist {where}")
    if node is not None and normalise(name) in {normalise(n) for n in after.allow}:
        print(f"note: {normalise(name)} stays whitelisted on every node")
    return 0


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.node in POLICY_COMMANDS:
        return await _policy(args, client)
    if args.action not in ("list", *SERVICE_ACTIONS):
        print(f"unknown services action {args.action!r}: list, start, stop or restart")
        return 2
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
