"""``mirbadllm ctl models updates|update|rollback``: newer revisions of models pulled from the hub.

    mirbadllm ctl models updates [--cached] [--all]   the models with an update (asks the hub now;
                                                      --cached: the daemon's last daily check)
    mirbadllm ctl models update MODEL                 fetch the newest revision beside the old files,
                                                      swap the model onto it (restarted if it ran)
    mirbadllm ctl models rollback MODEL               back to the files the last update kept

The daemon does the work (``daemon.sources.updates``, ``/api/model-updates``, ``/api/models/{id}/update``
and ``/rollback``); an update's download is followed like a pull's (``mirbadllm.ctl_sources.follow``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from agent.api.sources import TransferState
from daemon.api.client import DaemonClient
from daemon.api.model_updates import ModelUpdate
from daemon.api.sources import Transfer
from mirbadllm import ctl_sources

_LOGGER = logging.getLogger(__name__)


def add_parsers(models: Any) -> None:
    updates = models.add_parser("updates", help="models pulled from the hub that have a newer revision")
    updates.add_argument("--cached", action="store_true", help="the daemon's last (daily) check; don't ask the hub")
    updates.add_argument("--all", action="store_true", help="list every hub model, current ones too")
    update = models.add_parser("update", help="fetch a model's newest revision from the hub, keep the old files")
    update.add_argument("model", metavar="MODEL", help="the model's id")
    rollback = models.add_parser("rollback", help="back to the files (and revision) the last update kept")
    rollback.add_argument("model", metavar="MODEL", help="the model's id")


def _short(revision: str | None) -> str:
    return (revision or "?")[:12]


def update_line(found: ModelUpdate) -> str:
    """One model's state as a line: what the update brings, or why there is none."""
    where = f"{found.model}  {found.hf_repo}/{found.hf_file or ''}"
    if found.state == "available":
        return (f"{where}  {_short(found.revision)} -> {_short(found.latest)}  update available: "
                f"`mirbadllm ctl models update {found.model}`")
    if found.state == "refused":
        return f"{where}  refused: {found.reason}"
    if found.state == "failed":
        return f"{where}  not checked: {found.reason}"
    back = f"  (can roll back to {_short(found.previous_revision)})" if found.can_roll_back else ""
    return f"{where}  {found.state} at {_short(found.revision)}{back}"


async def list_updates(client: DaemonClient, cached: bool, every: bool) -> int:
    found = await client.model_updates(check=not cached)
    if not found:
        print("no model was pulled from the Hugging Face hub, so none has updates")
        return 0
    shown = [f for f in found if every or f.state in ("available", "refused", "failed")]
    for item in shown:
        print(update_line(item))
    if not any(f.state == "available" for f in found):
        print(f"no updates: {len(found)} model{'s' if len(found) != 1 else ''} from the hub checked"
              + ("" if cached else " now"))
    return 0


def report_update(model_id: str, done: Transfer) -> int:
    if done.state != TransferState.DONE:
        print(f"error: the update of '{model_id}' {done.state.value}: {done.error or 'no reason given'}; "
              "the model is unchanged", file=sys.stderr)
        return 1
    if not done.registered:
        print(f"error: {done.register_error or 'the model was not updated'}", file=sys.stderr)
        return 1
    fetched = done.result[0] if done.result else None
    revision = _short(fetched.revision if fetched else None)
    print(f"updated model '{model_id}' to revision {revision}"
          + (f": {fetched.model_path}" if fetched else ""))
    if done.register_error:  # updated, but its restart failed
        print(f"warning: {done.register_error}", file=sys.stderr)
    print(f"the old files are kept; go back with `mirbadllm ctl models rollback {model_id}`")
    return 0


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "updates":
        return await list_updates(client, args.cached, args.all)
    if args.action == "update":
        transfer = await client.update_model_files(args.model)
        return report_update(args.model, await ctl_sources.follow_or_cancel(client, transfer))
    view = await client.rollback_model(args.model)
    source = view.definition.sources
    print(f"rolled back model '{args.model}' to revision {_short(source.revision if source else None)}: "
          f"{view.definition.model_path} ({view.status.state.value})")
    return 0
