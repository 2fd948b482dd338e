"""``mirbadllm ctl models rm|du``: my models and the disk they take, from a terminal.

    mirbadllm ctl models rm MODEL [--files] [--yes]   # --files: and its files no other model uses
    mirbadllm ctl models du [--node NODE]             # per node: files, sizes, used by, free space

``rm --files`` says first what it would delete and the space that frees, and asks (``--yes``
skips the question; without a terminal it is required); then what it deleted and freed, and each
file it kept and why (another model uses it; outside the models folder: never ours to delete).
Nodes are shown and taken by name (``ctl nodes list``), never by their 64-hex id.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.files import (
    KeptFile,
    NodeFilesView,
    NodeFileView,
    files_to_free,
    unused_files,
)
from daemon.api.models import AUTO_NODE, ModelView
from mirbadllm import ctl_nodes


def add_parsers(models: Any) -> None:
    """``rm`` and ``du`` under ``ctl models``."""
    rm = models.add_parser("rm", help="remove a model; --files: and its files no other model uses")
    rm.add_argument("model", metavar="MODEL", help="the model's id or served name")
    rm.add_argument("--files", action="store_true",
                    help="also delete its files in the node's models folder that no other model uses")
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    du = models.add_parser("du", help="each node's model files: size, used by, unused ones; the disk's free space")
    du.add_argument("--node", help="one node: its name, id or id prefix (default: every online node)")


def size_text(n: int) -> str:
    if n < 2**20:
        return f"{n / 2**10:.1f} KiB"
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    return await _rm(args, client) if args.action == "rm" else await _du(args, client)


async def _model(client: DaemonClient, wanted: str) -> ModelView:
    views = await client.list_models()
    found = next((v for v in views if v.definition.id == wanted), None) or next(
        (v for v in views if v.definition.served_name == wanted), None)
    if found is None:
        raise DaemonError(404, "model_not_found", f"no model '{wanted}' (`ctl models list` shows them)")
    return found


def _used_by(f: NodeFileView) -> str:
    return ", ".join(f"{u.model}" + ("" if u.role == "model" else f" ({u.role})") for u in f.used_by) or "unused"


def _kept_line(k: KeptFile) -> str:
    return f"  kept {k.path}: {k.message}"


async def _rm(args: argparse.Namespace, client: DaemonClient) -> int:
    view = await _model(client, args.model)
    model_id = view.definition.id
    if not args.files:
        await client.delete_model(model_id)
        print(f"removed {model_id} (its files stay; --files deletes those no other model uses)")
        return 0
    node = view.status.node or view.definition.node  # an 'auto' model's: the node it runs on
    if node == AUTO_NODE:
        raise DaemonError(409, "files_unknown", f"{model_id} has not run on any node yet, so which node's files "
                                                "are its own is unknown; remove it without --files")
    listing = await client.node_files(node)
    going = files_to_free(listing, model_id)
    freed = sum(f.frees for f in going)
    print(f"{model_id} on {listing.node_name}: {len(going)} file(s) to delete, {size_text(freed)} to free")
    for f in going:
        print(f"  delete {f.path}  {size_text(f.size)}")
    if not args.yes:
        if not sys.stdin.isatty():
            print("nothing removed: confirm with --yes", file=sys.stderr)
            return 2
        if input(f"remove {model_id} and free {size_text(freed)}? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    removal = await client.delete_model_with_files(model_id)
    print(f"removed {model_id}; deleted {len(removal.deleted)} file(s), freed {size_text(removal.freed)} "
          f"on {removal.node_name}")
    for d in removal.deleted:
        print(f"  deleted {d.path}  {size_text(d.size)}" + ("" if d.freed == d.size else " (another link keeps it)"))
    for k in removal.kept:
        print(_kept_line(k))
    return 0


def _du_lines(listing: NodeFilesView) -> list[str]:
    used = sum(f.size for f in listing.files)
    lines = [(f"{listing.node_name}: {len(listing.files)} file(s), {size_text(used)} in {listing.models_dir}; "
             f"disk {size_text(listing.disk_free)} free of {size_text(listing.disk_total)}")]
    for f in listing.files:
        mark = "*" if f.unused else " "
        lines.append(f" {mark} {size_text(f.size):>11}  {f.path}  [{_used_by(f)}]")
    unused = unused_files(listing)
    if unused:
        lines.append(f"  * {len(unused)} unused file(s), {size_text(listing.unused_bytes)} that removing them frees")
    return lines


async def _du(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.node:
        nodes = [await ctl_nodes.resolve(client, args.node)]
    else:
        nodes = [n for n in await client.list_nodes() if n.state.value in ("online", "degraded", "unknown")]
    failed = 0
    for node in nodes:
        try:
            listing = await client.node_files(node.id)
        except DaemonError as exc:
            print(f"{node.name}: {exc.message}", file=sys.stderr)
            failed += 1
            continue
        print("\n".join(_du_lines(listing)))
    return 1 if failed else 0
