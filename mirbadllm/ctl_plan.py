"""``mirbadllm ctl models plan FILE|REPO[:QUANT] [--node N] [--ctx N]``: how a model runs here.

The daemon's ``POST /api/plan`` asks every online node (or the one named) how the file runs on it;
this prints one row per option (a GPU, the GPUs split by layers, a partial offload, the CPU,
unified memory, across nodes) with the context it is figured at, the largest context that fits now
and with the devices empty, and what each device holds of what it has (across nodes: what each
node holds, the main first); under each row the llama-server flags of that placement (across
nodes: each node's layers and the ``ctl models add`` flags that define it: the helpers and the
main node's part as its memory budget), and why it does not fit now when it
does not. A FILE is a
path on the node; REPO is a Hugging Face ``owner/repo[:QUANT]`` or ``owner/repo/file.gguf``, read
by its header only (each node reads it over HTTP ranges; nothing is downloaded). A plan is for one
model file: when REPO (or its QUANT) names several, nothing is planned and the command asks which,
listing each file as the command that plans it (exit status 1).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

from agent.api.sources import HfFileRef
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.plan import STATE_LABELS, Plan, PlanOption, PlanQuery
from mirbadllm import ctl_nodes
from mirbadllm.ctl_sources import _SEVERAL, hf_ref

GIB = 1 << 30
_REPO_FILE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/(?P<file>.+\.gguf)$", re.IGNORECASE)
COLUMNS = ("NODE", "OPTION", "STATE", "CTX", "MAX NOW", "MAX EMPTY", "HOLDS (needed / free, GiB)")


def add_parser(models: Any) -> None:
    plan = models.add_parser("plan", help="every way a GGUF runs on each node: GPUs, split, offload, CPU")
    plan.add_argument("model", metavar="FILE|REPO[:QUANT]",
                      help="a GGUF path on the node, or ggml-org/gemma-3-270m-GGUF:Q4_K_M (header read only); "
                           "a repo with several GGUF models: lists them, one to pick")
    plan.add_argument("--node", help="one node: name, id or id prefix (default: every online node)")
    plan.add_argument("--ctx", type=int, help="judge each option at this context (default: the largest that fits)")
    plan.add_argument("--revision", default="main")


def source_of(text: str, revision: str = "main") -> tuple[str | None, HfFileRef | None]:
    """A model path, or a Hugging Face file reference: a path is one that exists here or is
    written as one (``/``, ``~``, ``.``, a drive letter); else ``owner/repo[:QUANT]`` or
    ``owner/repo/file.gguf``."""
    local = Path(text).expanduser()
    if local.exists() or text.startswith(("/", "~", ".", "\\")) or re.match(r"^[A-Za-z]:[\\/]", text):
        return str(local.resolve()) if local.exists() else text, None
    found = _REPO_FILE.match(text)
    if found:
        return None, HfFileRef(repo=found["repo"], file=found["file"], revision=revision)
    try:
        return None, hf_ref(text, revision)
    except DaemonError:
        raise DaemonError(422, "invalid_request", f"'{text}' is neither a file nor REPO[:QUANT] "
                          "(e.g. ggml-org/gemma-3-270m-GGUF:Q4_K_M)") from None


def _gib(value: int) -> str:
    return f"{value / GIB:.1f}"


def _holds(option: PlanOption) -> str:
    return "  ".join(f"{d.device} {_gib(d.needed_bytes)}/{_gib(d.free_bytes)}" for d in option.devices)


def _shares(option: PlanOption, names: dict[str, str]) -> str:
    """Across nodes: each node's part, needed / free (GiB), the main first."""
    return "  ".join(f"{names.get(s.node, s.node[:12])} {_gib(s.needed_bytes)}/{_gib(s.free_bytes)}"
                     for s in option.shares)


def _row(node: str, option: PlanOption, names: dict[str, str] | None = None) -> tuple[str, ...]:
    if option.kind == "nodes":
        if not option.shares:
            return (node, option.label, STATE_LABELS[option.state], "-", "-", "-", "")
        label = f"across {len(option.shares)} nodes (llama.cpp RPC)"
        return (node, label, STATE_LABELS[option.state], str(option.ctx_size), str(option.max_ctx_size),
                str(option.max_ctx_size_empty), _shares(option, names or {}))
    return (node, option.label, STATE_LABELS[option.state], str(option.ctx_size), str(option.max_ctx_size),
            str(option.max_ctx_size_empty), _holds(option))


def split_line(option: PlanOption, names: dict[str, str]) -> str:
    """Across nodes: the layers each node holds and the helpers a definition names (rpc_nodes)."""
    parts = ", ".join(f"{s.layers} on {names.get(s.node, s.node[:12])} ({s.role}, {s.device})" for s in option.shares)
    main = next((s for s in option.shares if s.role == "main"), None)
    budget = [f"--memory-budget {math.ceil(main.needed_bytes * 100 / GIB) / 100:g}"] if main else []
    flags = " ".join([f"--node {names.get(option.node, option.node)}",
                      *(f"--rpc-node {names.get(n, n)}" for n in option.rpc_nodes), *budget])
    return f"layers: {parts}; add it with `ctl models add ... {flags}`"


def table(plan: Plan, names: dict[str, str] | None = None) -> list[str]:
    """The plan as lines: a heading on the model, one row per option with its flags and (when it does
    not fit now) why under it, then the nodes that gave no plan."""
    names = names or {}
    lines: list[str] = []
    if plan.summary is not None:
        s = plan.summary
        native = f", native context {s.context_length}" if s.context_length else ""
        lines.append(f"{s.name or s.architecture}: {s.architecture}, {s.block_count} layers, "
                     f"{_gib(s.file_size)} GiB{native} ({plan.source})")
    rows: list[tuple[tuple[str, ...], PlanOption]] = [
        (_row(names.get(o.node, o.node) or "fleet", o, names), o) for o in plan.options()]
    widths = [max([len(COLUMNS[i])] + [len(r[i]) for r, _ in rows]) for i in range(len(COLUMNS))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    lines.append(line(COLUMNS))
    for cells, option in rows:
        lines.append(line(cells))
        indent = " " * (widths[0] + 2)
        if option.shares:
            lines.append(indent + split_line(option, names))
        if option.args:
            lines.append(indent + " ".join(option.args))
        if option.state != "free" and option.message:
            lines.append(indent + option.message)
    lines += [f"{names.get(e.node, e.node)}: no plan ({e.code}): {e.message}" for e in plan.errors]
    best = plan.best()
    if best is None:
        lines.append("nothing fits on any node, even with room made")
    return lines


def which_file(message: str, revision: str = "main") -> list[str] | None:
    """A plan refused because the repo (or quant) names several models: which one, each as the
    command that plans it; None for any other refusal."""
    found = _SEVERAL.search(message)
    if found is None:
        return None
    files = [f.strip() for f in found["files"].split(",") if f.strip()]
    more = "" if revision == "main" else f" --revision {revision}"
    return [f"{found['repo']} holds several GGUF models; a plan is for one file. Plan one of them:",
            *(f"  mirbadllm ctl models plan {found['repo']}/{f}{more}" for f in files),
            *(["  (the first six; the repo may hold more)"] if len(files) >= 6 else []),
            f"(or by quant: {found['repo']}:QUANT, when one file has it)"]


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    node = await ctl_nodes.resolve_id(client, args.node) if args.node else None
    path, hf = source_of(args.model, args.revision)
    try:
        plan = await client.plan(PlanQuery(node=node, model_path=path, hf=hf, ctx_size=args.ctx))
    except DaemonError as exc:
        choices = which_file(exc.message, args.revision) if hf is not None else None
        if choices is None:
            raise
        for text in choices:
            print(text)
        return 1
    names = {n.id: n.name for n in await client.list_nodes() if n.name}
    for text in table(plan, names):
        print(text)
    return 0 if plan.best() is not None else 1
