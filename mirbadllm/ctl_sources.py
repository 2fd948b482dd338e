"""``mirbadllm ctl models pull|import``: get a model onto a node from a terminal, with a progress bar.

    mirbadllm ctl models pull REPO[:QUANT] | NAME [--id ID] [--node NODE] [--no-register]
    mirbadllm ctl models import ollama NAME [--store DIR] [--copy] [--id ID] [--node NODE]
    mirbadllm ctl models import folder PATH [--node NODE]
    mirbadllm ctl models import lmstudio [--node NODE] [--folder PATH] [--all | NAME...] (ctl_lmstudio)
    mirbadllm ctl models mirror MODEL|FILE --to NODE [--mmproj FILE] [--id ID] [--no-register]

The daemon's admin API does the work (``/api/downloads``, ``/api/imports/*``), exactly as the app's
add-model wizard does (a catalog's short NAME such as ``gemma3:1b`` is its repository and file,
``mirbadllm.ctl_discover``; ``mirror``: ``/api/mirror``, the daemon pushes a model this machine has to
another node, checked there, ``daemon.sources.mirror``); this module starts the transfer, draws its progress from the event feed,
and says which models were registered and how to start them. Ctrl-C cancels the transfer.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path
from typing import Any, TextIO

from agent.api.sources import FINISHED_TRANSFERS, HfFileRef, TransferState
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.hub import is_short_name
from daemon.api.mirror import MirrorQuery
from daemon.api.sources import (
    DownloadQuery,
    FolderImportQuery,
    OllamaImportQuery,
    Transfer,
)
from mirbadllm import ctl_discover, ctl_lmstudio, ctl_nodes

BAR_WIDTH = 28
ANY_GGUF = "*.gguf"
_SEVERAL = re.compile(r"matches several models in (?P<repo>\S+): (?P<files>.*); name one file")


def add_parsers(models: Any) -> None:
    """``pull`` and ``import`` under ``ctl models``."""
    pull = models.add_parser("pull", help="download a GGUF from Hugging Face: REPO[:QUANT], or a catalog NAME")
    pull.add_argument("ref", metavar="REPO[:QUANT]|NAME",
                      help="e.g. ggml-org/gemma-3-270m-GGUF:Q4_K_M, or gemma3:1b (`ctl models catalog`)")
    pull.add_argument("--revision", default="main")
    _registration_args(pull)
    imp = models.add_parser("import", help="register models from Ollama's store, LM Studio's folders or a folder "
                                           "of GGUF files")
    sources = imp.add_subparsers(dest="source", required=True)
    ollama = sources.add_parser("ollama", help="an Ollama model, e.g. llama3.2:3b")
    ollama.add_argument("name")
    ollama.add_argument("--store", help="Ollama's models folder (default ~/.ollama/models)")
    ollama.add_argument("--copy", action="store_true", help="copy the files instead of hard-linking them")
    _registration_args(ollama)
    folder = sources.add_parser("folder", help="every GGUF in a folder, registered where it is")
    folder.add_argument("path")
    _registration_args(folder, one_model=False)
    ctl_lmstudio.add_parser(sources)
    mirror = models.add_parser("mirror", help="push a model this machine has to another node, checked there")
    mirror.add_argument("model", metavar="MODEL|FILE",
                        help="a model id on this machine, or a GGUF in its models folder (a path)")
    mirror.add_argument("--to", required=True, help="the node that gets it: name, id or id prefix")
    mirror.add_argument("--mmproj", help="with FILE: its vision projector")
    mirror.add_argument("--id", dest="model_id", help="the id registered on the node (default: from the model's)")
    mirror.add_argument("--served-name", help="the `model` clients send for it (default: the id)")
    mirror.add_argument("--no-register", action="store_true", help="place the files only; register nothing")


def _registration_args(parser: argparse.ArgumentParser, one_model: bool = True) -> None:
    parser.add_argument("--node", default="local", help="node name, id or id prefix (see `ctl nodes list`)")
    parser.add_argument("--no-register", action="store_true", help="fetch the files only; register nothing")
    parser.add_argument("--tag", action="append", default=[])
    if one_model:
        parser.add_argument("--id", dest="model_id", help="the model's id (default: from the file name)")
        parser.add_argument("--served-name", help="the `model` clients send (default: the id)")


def hf_ref(text: str, revision: str = "main") -> HfFileRef:
    """``owner/repo[:QUANT]`` as a file reference: the GGUF whose name holds QUANT, else any one GGUF."""
    repo, _, quant = text.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise DaemonError(422, "invalid_request", f"'{text}' is not REPO[:QUANT], e.g. ggml-org/gemma-3-270m-GGUF:Q4_K_M")
    if quant:
        return HfFileRef(repo=repo, quant=quant, revision=revision)
    return HfFileRef(repo=repo, file=ANY_GGUF, revision=revision)


def explain(error: str | None, ref: HfFileRef | None = None) -> str:
    """The failure in the user's words: several files and no quant becomes the list to pick from."""
    text = error or "no reason given"
    found = _SEVERAL.search(text)
    if found and ref is not None and ref.file == ANY_GGUF:
        return (f"{found['repo']} holds several GGUF models: {found['files']}. Pick one with "
                f"{found['repo']}:QUANT, e.g. {found['repo']}:Q4_K_M")
    return text


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def progress_line(t: Transfer, width: int = BAR_WIDTH) -> str:
    """``[##########..........]  45 %  12.0/26.7 MiB  downloading``."""
    if t.bytes_total:
        share = min(t.bytes_done / t.bytes_total, 1.0)
        filled = round(share * width)
        return (f"[{'#' * filled}{'.' * (width - filled)}] {share * 100:3.0f} %  "
                f"{_size(t.bytes_done)}/{_size(t.bytes_total)}  {t.stage or t.state.value}")
    return f"{t.label}: {t.stage or t.state.value}"


async def follow(client: DaemonClient, transfer: Transfer, out: TextIO | None = None) -> Transfer:
    """Draw the transfer's progress (on stderr) from the event feed until it is finished."""
    out = out or sys.stderr
    since, view, stage = 0, transfer, ""
    tty = out.isatty()
    while view.state not in FINISHED_TRANSFERS:
        page = await client.events(since, timeout=15)
        if page.reset or since == 0:
            view = await client.transfer(transfer.id)  # catch up on what happened before we listened
        since = page.last_id
        for event in page.events:
            if event.type.startswith("transfer.") and event.data.get("id") == transfer.id:
                fields = {k: v for k, v in event.data.items() if k in Transfer.model_fields}
                view = Transfer.model_validate({**view.model_dump(), **fields})
        if tty:
            out.write(f"\r{progress_line(view)}\x1b[K")
        elif view.stage != stage:  # a log, not an animation: one line per stage
            out.write(progress_line(view) + "\n")
        stage = view.stage
        out.flush()
    if tty:
        out.write("\n")
    return await client.transfer(transfer.id)  # the final one, with what was registered


def mirror_query(args: argparse.Namespace, target: str) -> MirrorQuery:
    """``ctl models mirror``'s arguments: a model id, or (it has a '/' or a '.') a file."""
    fields = {"target_node": target, "register_model": not args.no_register, "register_id": args.model_id,
              "served_name": args.served_name}
    if "/" in args.model or "." in args.model:
        path = Path(args.model).expanduser()
        return MirrorQuery(path=str(path.resolve()) if path.is_absolute() or path.exists() else args.model,
                           projector_path=args.mmproj, **fields)
    if args.mmproj:
        raise DaemonError(422, "invalid_request", "--mmproj goes with a FILE; a model brings its own")
    return MirrorQuery(model_id=args.model, **fields)


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "mirror":
        transfer = await client.mirror(mirror_query(args, await ctl_nodes.resolve_id(client, args.to)))
        print(f"{transfer.label}: {transfer.state.value}", file=sys.stderr, flush=True)
        return report(await follow(client, transfer))
    if args.action == "import" and args.source == "lmstudio":
        return await ctl_lmstudio.run(args, client)
    node = await ctl_nodes.resolve_id(client, args.node)
    registration: dict[str, Any] = {"node": node, "register_models": not args.no_register, "tags": args.tag,
                                    "model_id": getattr(args, "model_id", None),
                                    "served_name": getattr(args, "served_name", None)}
    ref: HfFileRef | None = None
    if args.action == "pull" and is_short_name(args.ref):
        return await pull_catalog_model(client, args.ref, registration)
    if args.action == "pull":
        ref = hf_ref(args.ref, args.revision)
        transfer = await client.download(DownloadQuery(hf=ref, **registration))
    elif args.source == "ollama":
        transfer = await client.import_ollama(OllamaImportQuery(model=args.name, store=args.store,
                                                                copy_files=args.copy, **registration))
    else:
        folder = str(Path(args.path).expanduser().resolve()) if node == "local" else args.path
        transfer = await client.import_folder(FolderImportQuery(folder=folder, **registration))
    return report(await follow_or_cancel(client, transfer), ref)


async def follow_or_cancel(client: DaemonClient, transfer: Transfer) -> Transfer:
    """Follow a transfer to its end; Ctrl-C (the task cancelled) cancels it on the daemon too."""
    print(f"{transfer.label}: {transfer.state.value} (Ctrl-C cancels)", file=sys.stderr, flush=True)
    try:
        return await follow(client, transfer)
    except asyncio.CancelledError:
        cancelled = await client.cancel_transfer(transfer.id)
        print(f"\ncancelled {transfer.label}: {cancelled.state.value}", file=sys.stderr, flush=True)
        raise


async def pull_catalog_model(client: DaemonClient, name: str, registration: dict[str, Any] | None = None) -> int:
    """Download a catalog model by its short name, registered as that name (``gemma3:1b`` is served as
    itself, id ``gemma3-1b``), unless a model for it is already on the node."""
    registration = dict(registration or {})
    node = registration.get("node") or "local"
    entry = await ctl_discover.catalog_entry(client, name)
    existing = ctl_discover.registered_as(await client.list_models(), entry, node)
    if existing is not None:
        print(f"{entry.name} is already here as model '{existing.definition.id}'; chat with it: "
              f"`mirbadllm run {entry.name}`")
        return 0
    registration.update(node=node, model_id=registration.get("model_id") or entry.model_id,
                        served_name=registration.get("served_name") or entry.name)
    print(f"{entry.name}: {entry.repo} {entry.file} (about {ctl_discover.size_text(entry.size)})",
          file=sys.stderr, flush=True)
    transfer = await client.download(DownloadQuery(hf=entry.ref(), **registration))
    return report(await follow_or_cancel(client, transfer), entry.ref())


def report(done: Transfer, ref: HfFileRef | None = None) -> int:
    if done.state != TransferState.DONE:
        print(f"error: {done.label} {done.state.value}: {explain(done.error, ref)}", file=sys.stderr)
        return 1
    for model in done.result:
        print(f"got {model.model_path} ({_size(model.size)})")
    if done.register_error:
        print(f"error: not registered: {done.register_error}", file=sys.stderr)
    for model_id in done.registered:
        print(f"added model '{model_id}'; start it with `mirbadllm ctl models start {model_id} --wait` "
              f"or chat with it: `mirbadllm run {model_id}`")
    for model_id in done.existing:
        print(f"already added as model '{model_id}' (not registered again); "
              f"start it with `mirbadllm ctl models start {model_id} --wait`")
    if not done.registered and not done.register_error and not done.existing:
        print("nothing registered; add it with `mirbadllm ctl models add ID PATH`")
    return 1 if done.register_error and not done.registered else 0
