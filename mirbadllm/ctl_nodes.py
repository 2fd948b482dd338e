"""``mirbadllm ctl nodes``: the machines of the fleet from a terminal, through ``DaemonClient``.

    mirbadllm ctl nodes list                              # with each node's runtimes
    mirbadllm ctl nodes show NODE                         # its runtimes: version, where, or why not
    mirbadllm ctl nodes discovered
    mirbadllm ctl nodes add ADDRESS                       # when multicast does not reach the agent
    mirbadllm ctl nodes pair ADDRESS CODE [--fingerprint FP] [--yes]
    mirbadllm ctl nodes remove NODE                       # id, id prefix or name
    mirbadllm ctl nodes backend NODE auto|cuda|vulkan|cpu # what llama.cpp computes on there (next start)
    mirbadllm ctl nodes runtime-upgrade [--folder F] [--smoke-model PATH]
                                                          # roll a llama.cpp build out, one node at a time
    mirbadllm ctl nodes rotate-ca                         # a new CA on every node, the old one retired (ctl_ca_rotation)

``runtime-upgrade`` waits for the rollout: it prints each node's state as the daemon's events
(``runtime_upgrade.node``) report it, then every node's final state; it exits 1 when the rollout
failed (the node that failed was rolled back, the nodes after it were never told).

Without ``--fingerprint`` the agent's fingerprint is looked up (discovered list, else the address)
and shown for the user to compare with what the agent printed before anything is sent.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agent.api.runtimes import RUNTIME_LABELS, RUNTIMES, RuntimeOffer
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.nodes import DiscoveredNode, NodeView, llamacpp_offer
from daemon.api.runtime_upgrades import RuntimeRolloutView
from daemon.api.upgrades import NodeUpgradeView, RolloutState, RolloutView
from mirbadllm.ctl_ca_rotation import rotate_ca


def add_parser(groups: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    nodes = groups.add_parser("nodes", help="machines: list, show, discovered, add, pair, remove, runtime-upgrade")
    actions = nodes.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="paired nodes and this machine")
    actions.add_parser("discovered", help="agents waiting to be paired")
    show = actions.add_parser("show", help="one node and its runtimes (version, where, or why not)")
    show.add_argument("node", help="node id, a unique id prefix, or its name")
    add = actions.add_parser("add", help="look for an agent at an address")
    add.add_argument("address", help="host, host:port or [v6]:port (default port 9443)")
    pair = actions.add_parser("pair", help="pair the agent at ADDRESS with the code it prints")
    pair.add_argument("address")
    pair.add_argument("code", help="the pairing code the agent prints, e.g. ABCD-EFGH")
    pair.add_argument("--fingerprint", help="the agent's full fingerprint (default: look it up and ask)")
    pair.add_argument("--yes", "-y", action="store_true", help="do not ask to compare the fingerprint")
    remove = actions.add_parser("remove", help="stop its models, unpair it and forget it")
    remove.add_argument("node", help="node id, a unique id prefix, or its name")
    backend = actions.add_parser("backend", help="choose what llama.cpp computes on there: auto (the best that "
                                 "works), cuda, vulkan or cpu; models started afterwards use it")
    backend.add_argument("node", help="node id, a unique id prefix, or its name")
    backend.add_argument("backend", help="auto, cuda, vulkan or cpu")
    actions.add_parser("rotate-ca", help="replace the daemon's CA: every online node gets a certificate from a new "
                       "CA, then the old CA is retired; offline nodes are named (pair them again)")
    upgrade = actions.add_parser("runtime-upgrade", help="roll a llama.cpp build out over the paired nodes, "
                                 "one at a time, and wait for it")
    upgrade.add_argument("--folder", help="the build folder `make runtime` wrote (llamacpp-<version>-<key>/); "
                         "default: the newest one")
    upgrade.add_argument("--smoke-model", help="a GGUF file present on every node for the one-token smoke test; "
                         "default: per node, the file of the first llama.cpp model registered there")


def _size(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**30:.1f} GiB"


def _offers(node: NodeView) -> list[RuntimeOffer | None]:
    """Every runtime there is, in order: what the node offers of it (None: it says nothing)."""
    by_runtime = {o.runtime: o for o in node.runtimes}
    return [by_runtime.get(runtime) for runtime in RUNTIMES]


def fmt_runtimes(node: NodeView) -> str:
    """``llama.cpp b4242 (fa4e1234), vLLM —, MLX —``; "runtimes unknown" before the node reports."""
    if not node.runtimes:
        return "runtimes unknown"
    parts = []
    for runtime, offer in zip(RUNTIMES, _offers(node), strict=True):
        label = RUNTIME_LABELS.get(runtime, runtime)
        parts.append(f"{label} {offer.version or 'available'}" if offer is not None and offer.available
                     else f"{label} —")
    return ", ".join(parts)


def fmt_node(node: NodeView) -> str:
    ident = "local" if node.local else node.id[:12]
    where = node.address or "this machine"
    gpus = f"  {len(node.gpus)} GPU" if node.gpus else ""
    models = f"  models: {', '.join(node.models)}" if node.models else ""
    reason = f"\n    {node.reason}" if node.reason else ""
    return (f"{ident:<13} {node.name:<20} {node.state.value:<9} {where:<22} "
            f"{_size(node.memory_available)} free{gpus}  {fmt_runtimes(node)}{models}{reason}")


def fmt_node_detail(node: NodeView) -> str:
    """``ctl nodes show``: the node's line, then one line per runtime with where it is or why not."""
    lines = [fmt_node(node)]
    if not node.runtimes:
        lines.append("  runtimes: not reported yet (the node is offline or has not answered a status probe)")
    for runtime, offer in zip(RUNTIMES, _offers(node) if node.runtimes else [], strict=False):
        label = RUNTIME_LABELS.get(runtime, runtime)
        if offer is None:
            lines.append(f"  {label:<10} —  its agent has no {label} driver")
        elif offer.available:
            digest = f"  digest {offer.digest[:12]}" if offer.digest else ""
            lines.append(f"  {label:<10} {offer.version or 'version unknown'}  {offer.location or ''}{digest}")
        else:
            lines.append(f"  {label:<10} —  {offer.reason or 'unavailable'}")
    lines += fmt_backends(node)
    if node.keys_at_rest is not None and node.keys_at_rest.warning:
        lines.append(f"  keys       {node.keys_at_rest.warning}")
    return "\n".join(lines)


def fmt_backends(node: NodeView) -> list[str]:
    """The backend lines of ``ctl nodes show``: which one runs and why not a better one, then each
    backend of the build with its devices or the reason it is unavailable."""
    offer = llamacpp_offer(node.runtimes)
    if node.backend is None:
        return [f"  backend    choice {node.backend_choice}; the node has not said what its build can do"]
    lines = [f"  backend    {node.backend.label} (choice {node.backend_choice})"
             + (f"; not {node.backend_why}" if node.backend_why else "")]
    for state in offer.backends if offer is not None else []:
        if state.backend.value == "cpu":
            continue
        devices = ", ".join(f"{d.name} {d.description} {d.memory_total_mib} MiB" for d in state.devices)
        mark = "ok" if state.available and state.verified else "unproven" if state.available else "—"
        detail = devices if state.available else (state.reason or "unavailable")
        driver = f"  driver {state.driver}" if state.driver else ""
        lines.append(f"    {state.backend.label:<8} {mark:<8} {detail}{driver}")
    if node.runtime_pack is not None:
        lines.append(f"  pack       {node.runtime_pack.state}: {node.runtime_pack.message}")
    return lines


def fmt_discovered(entry: DiscoveredNode) -> str:
    return f"{entry.name:<20} {entry.address:<22} {entry.short_fingerprint}  ({entry.source})"


MIN_PREFIX = 4


def _listing(nodes: list[NodeView]) -> str:
    return "; ".join(f"{'local' if n.local else n.id[:12]} ({n.name})" for n in nodes) or "none"


async def resolve(client: DaemonClient, wanted: str) -> NodeView:
    """The node ``wanted`` names: its id, its name, or a unique id prefix (at least 4 characters).
    An unknown or ambiguous name is a ``DaemonError`` that lists the nodes there are."""
    nodes = await client.list_nodes()
    exact = [n for n in nodes if wanted in (n.id, n.name) or (wanted == "local" and n.local)]
    found = exact or [n for n in nodes if len(wanted) >= MIN_PREFIX and n.id.startswith(wanted.lower())]
    if len(found) == 1:
        return found[0]
    if found:
        raise DaemonError(409, "ambiguous", f"more than one node matches '{wanted}': {_listing(found)}; "
                                            "type more of the id")
    raise DaemonError(404, "node_not_found", f"no node matches '{wanted}' (a name, an id or at least "
                                             f"{MIN_PREFIX} characters of one); nodes: {_listing(nodes)}")


async def resolve_id(client: DaemonClient, wanted: str) -> str:
    """The full node id for a name or id prefix, as models and transfers store it."""
    if wanted == "local":
        return wanted
    return (await resolve(client, wanted)).id


async def _fingerprint(client: DaemonClient, address: str) -> DiscoveredNode:
    entry = next((d for d in await client.discovered_nodes() if address in (d.address, d.host)), None)
    if entry is not None:
        return entry
    result = await client.add_node_address(address)
    if result.discovered is None:
        assert result.node is not None
        raise DaemonError(409, "already_paired", f"{address} is node '{result.node.name}', already paired")
    return result.discovered


def fmt_upgrade_node(node: NodeUpgradeView) -> str:
    was = f"  (was {node.from_version})" if node.from_version else ""
    reason = f"  {node.reason}" if node.reason else ""
    return f"  {node.name:<20} {node.state.value:<9}{was}{reason}"


def fmt_rollout_view(view: RuntimeRolloutView | RolloutView, what: str, none: str) -> str:
    """A rollout's outcome (``what``: "llama.cpp b1234", "agent 0.2.0"; ``none``: said when there was
    none), then one line per node in rollout order."""
    heads = {RolloutState.DONE: f"{what}: done on {len(view.nodes)} node(s)",
             RolloutState.FAILED: f"{what}: failed: {view.reason or 'no reason given'}",
             RolloutState.RUNNING: f"{what}: running"}
    return "\n".join([heads.get(view.state, none), *(fmt_upgrade_node(n) for n in view.nodes)])


def fmt_runtime_rollout(view: RuntimeRolloutView) -> str:
    return fmt_rollout_view(view, f"llama.cpp {view.build or 'no build'}",
                            "no llama.cpp build rollout since the daemon started")


async def _runtime_upgrade(args: argparse.Namespace, client: DaemonClient) -> int:
    since = (await client.events(0, timeout=0)).last_id
    started = await client.start_runtime_upgrade(args.folder, args.smoke_model)
    print(f"rolling llama.cpp {started.build} ({started.version}) out to {len(started.nodes)} node(s), "
          "one at a time")
    view = await follow_rollout(client, started, since, "runtime_upgrade", client.runtime_upgrade_status)
    print(fmt_runtime_rollout(view))
    return 0 if view.state == RolloutState.DONE else 1


V = TypeVar("V", bound=RolloutView)


async def follow_rollout(client: DaemonClient, started: V, since: int, events: str,
                         status: Callable[[], Awaitable[V]]) -> V:
    """Print each node's step (``{events}.node``) from event ``since`` on until the rollout
    ``started`` ends (``{events}.finished``); its view then, as ``status`` reads it."""
    names = {n.node: n.name for n in started.nodes}
    view = started
    while view.state == RolloutState.RUNNING:
        page = await client.events(since, timeout=10)
        since = page.last_id
        for event in page.events:
            if event.type == f"{events}.node":
                node = str(event.data.get("node", ""))
                name = names.get(node) or str(event.data.get("name") or node[:12])
                reason = f"  {event.data['reason']}" if event.data.get("reason") else ""
                print(f"  {name:<20} {event.data.get('state')}{reason}", flush=True)
        if page.reset or not page.events or any(e.type == f"{events}.finished" for e in page.events):
            view = await status()
    return view


async def run(args: argparse.Namespace, client: DaemonClient,
              ask: Callable[[str], str] = input) -> int:
    if args.action == "list":
        for node in await client.list_nodes():
            print(fmt_node(node))
    elif args.action == "show":
        print(fmt_node_detail(await resolve(client, args.node)))
    elif args.action == "backend":
        node = await client.set_node_backend(await resolve_id(client, args.node), args.backend)
        print(f"{node.name}: llama.cpp computes on {node.backend.label if node.backend else 'what it reports'} "
              f"(choice {node.backend_choice}){f'; not {node.backend_why}' if node.backend_why else ''}; "
              "models started from now on use it")
    elif args.action == "discovered":
        entries = await client.discovered_nodes()
        for entry in entries:
            print(fmt_discovered(entry))
        if not entries:
            print("no agent waiting to be paired was seen; `mirbadllm ctl nodes add ADDRESS` looks at one")
    elif args.action == "add":
        result = await client.add_node_address(args.address)
        if result.discovered is not None:
            print(f"agent '{result.discovered.name}' waits to be paired at {result.discovered.address}; "
                  f"fingerprint {result.discovered.short_fingerprint}")
        elif result.node is not None:
            print(f"already paired: {fmt_node(result.node)}")
    elif args.action == "pair":
        address, fingerprint = args.address, args.fingerprint
        if fingerprint is None:
            entry = await _fingerprint(client, address)
            address, fingerprint = entry.address, entry.fingerprint
            print(f"The agent '{entry.name}' at {entry.address} shows fingerprint {entry.short_fingerprint}")
            if not args.yes and ask("Is it the one the agent printed? [y/N] ").strip().lower() not in ("y", "yes"):
                print("not paired", file=sys.stderr)
                return 1
        node = await client.pair_node(address, args.code, fingerprint)
        print(f"paired: {fmt_node(node)}")
    elif args.action == "runtime-upgrade":
        return await _runtime_upgrade(args, client)
    elif args.action == "rotate-ca":
        return await rotate_ca(client)
    else:
        node = await resolve(client, args.node)
        await client.remove_node(node.id)
        print(f"removed {node.name} ({node.id[:12]})")
    return 0
