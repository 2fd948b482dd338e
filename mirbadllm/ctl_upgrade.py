"""``mirbadllm ctl upgrade``: which version the daemon and every node's agent run, and the agent rollout.

    mirbadllm ctl upgrade                    the daemon's version, each node's agent version, the last rollout
    mirbadllm ctl upgrade nodes [--folder F | --feed URL]   roll the agent release out, one node at a time

``nodes`` is ``POST /api/nodes/upgrade`` (``daemon.upgrades``): the release staged in the folder, or
fetched by the daemon from the signed feed (``--feed``: the one the app updated from; its version
must be the daemon's). The daemon checks its signature and refuses a downgrade before any node is told, then upgrades one node at a
time and stops at the first that fails. This waits, printing each node's state as the daemon's
``upgrade.node`` events report it, then every node's outcome; it exits 1 when the rollout failed.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from packaging.version import InvalidVersion, Version

from daemon.api.client import DaemonClient
from daemon.api.nodes import NodeView
from daemon.api.upgrades import RolloutState, RolloutView
from mirbadllm.ctl_nodes import fmt_rollout_view, follow_rollout

_LOGGER = logging.getLogger(__name__)


def add_parser(groups: Any) -> None:
    upgrade = groups.add_parser("upgrade", help="the daemon's and every agent's version; `upgrade nodes` rolls "
                                "the agent release out one node at a time")
    actions = upgrade.add_subparsers(dest="action")
    nodes = actions.add_parser("nodes", help="roll the staged agent release out, one node at a time, stopping "
                               "at the first that fails")
    source = nodes.add_mutually_exclusive_group()
    source.add_argument("--folder", help="where the release is staged (feed.json, feed.json.sig, the agent "
                        "builds); default: the daemon's {home}/agent-release")
    source.add_argument("--feed", help="the signed release feed's URL (feed.json): the daemon fetches the agent "
                        "builds of its own version from it")


def _older(version: str, than: str) -> bool:
    try:
        return Version(version) < Version(than)
    except InvalidVersion:
        return False


def fmt_versions(daemon_version: str, nodes: list[NodeView]) -> list[str]:
    """One line per node: its agent's version, and whether it is behind the daemon."""
    lines = []
    for node in nodes:
        where = "this machine" if node.local else node.name
        behind = "  older than the daemon" if node.version and _older(node.version, daemon_version) else ""
        lines.append(f"  {where:<20} {node.version or 'not reported':<14}{behind}")
    return lines


def fmt_rollout(view: RolloutView) -> str:
    """The last rollout's outcome, then one line per node in rollout order."""
    return fmt_rollout_view(view, f"agent {view.version or 'no release'}", "no agent rollout since the daemon started")


async def _status(client: DaemonClient) -> int:
    daemon_version = (await client.status()).daemon.version
    nodes = await client.list_nodes()
    print(f"daemon {daemon_version}")
    print("agents:")
    for line in fmt_versions(daemon_version, nodes):
        print(line)
    print(fmt_rollout(await client.upgrade_status()))
    if any(not n.local and n.version and _older(n.version, daemon_version) for n in nodes):
        print(f"`mirbadllm ctl upgrade nodes` rolls {daemon_version} out to them, one node at a time")
    return 0


async def roll_out(client: DaemonClient, folder: str | None, feed_url: str | None = None) -> int:
    since = (await client.events(0, timeout=0)).last_id
    started = await client.start_upgrade(folder, feed_url)
    print(f"rolling agent {started.version} out to {len(started.nodes)} node(s), one at a time")
    view = await follow_rollout(client, started, since, "upgrade", client.upgrade_status)
    print(fmt_rollout(view))
    return 0 if view.state == RolloutState.DONE else 1


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "nodes":
        return await roll_out(client, args.folder, args.feed)
    return await _status(client)
