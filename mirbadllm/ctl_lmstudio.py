"""``mirbadllm ctl models import lmstudio``: LM Studio's models from a terminal, listed or imported.

    mirbadllm ctl models import lmstudio [--node N] [--folder PATH]            # list them
    mirbadllm ctl models import lmstudio [--node N] [--folder PATH] --all | NAME...

The node's agent lists the GGUFs of LM Studio's folders (``~/.lmstudio/models``, the older
``~/.cache/lm-studio/models``, and ``--folder``, one of the same ``publisher/model/file.gguf``
layout); the daemon says which model already runs each (``GET /api/imports/lmstudio``). An import
registers the files where they lie, each with its folder's vision projector
(``POST /api/imports/lmstudio``); a file registered before is named ("already added as model 'x'"),
not added again. A NAME is the listed ``publisher/model/file.gguf``, its file name, or any part of it
that names one model.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.sources import LmStudioImportQuery, LmStudioModel
from mirbadllm import ctl_nodes, ctl_sources

_LOGGER = logging.getLogger(__name__)


def add_parser(sources: Any) -> None:
    """``lmstudio`` under ``ctl models import``."""
    lms = sources.add_parser("lmstudio", help="LM Studio's GGUF models, registered where they are; "
                                              "no NAME: list them")
    lms.add_argument("names", nargs="*", metavar="NAME", help="publisher/model/file.gguf, its file name, or "
                                                                "a part naming one model")
    lms.add_argument("--all", action="store_true", help="import every model listed")
    lms.add_argument("--folder", help="a models folder of LM Studio's layout besides its own (on the node)")
    lms.add_argument("--node", default="local", help="node name, id or id prefix (see `ctl nodes list`)")
    lms.add_argument("--tag", action="append", default=None, help="tags of the models added (default: lmstudio)")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def row(m: LmStudioModel) -> str:
    """``publisher/model/file.gguf  Q4_K_M  2.50 GiB  +projector  added as 'x'``."""
    parts = [m.model, m.quant or "-", _size(m.size)]
    if m.projector_path:
        parts.append("+projector")
    parts.append(f"added as '{m.registered_as}'" if m.registered_as else "not added")
    return "  ".join(parts)


def pick(listed: list[LmStudioModel], names: list[str]) -> list[LmStudioModel]:
    """The listed models the NAMEs say, in their order; a NAME naming none or several is an error."""
    picked: list[LmStudioModel] = []
    for name in names:
        exact = [m for m in listed if name in (m.model, m.path, m.model.rsplit("/", 1)[-1])]
        found = exact or [m for m in listed if name.lower() in m.model.lower()]
        if not found:
            raise DaemonError(404, "not_found", f"no LM Studio model '{name}' on the node; list them with "
                                                "`mirbadllm ctl models import lmstudio`")
        if len(found) > 1:
            raise DaemonError(422, "invalid_request", f"'{name}' names several models: "
                                                      + ", ".join(m.model for m in found) + "; name one")
        if found[0] not in picked:
            picked.append(found[0])
    return picked


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    node = await ctl_nodes.resolve_id(client, args.node)
    folder = args.folder
    if folder and node == "local":
        folder = str(Path(folder).expanduser().resolve())
    listed = await client.lmstudio_models(node, folder)
    if not args.names and not args.all:
        if not listed:
            print("no GGUF models in LM Studio's folders on the node" + (f" or in {folder}" if folder else ""))
        for m in listed:
            print(row(m))
        return 0
    if args.all and args.names:
        raise DaemonError(422, "invalid_request", "give --all or NAMEs, not both")
    picked = listed if args.all else pick(listed, args.names)
    if not picked:
        print("no GGUF models in LM Studio's folders on the node; nothing to import")
        return 0
    tags = {"tags": args.tag} if args.tag else {}
    transfer = await client.import_lmstudio(LmStudioImportQuery(node=node, folder=folder,
                                                                paths=[m.path for m in picked], **tags))
    return ctl_sources.report(await ctl_sources.follow_or_cancel(client, transfer))

