"""``mirbadllm ctl``: the daemon from a terminal, through the typed ``DaemonClient``.

    mirbadllm ctl status
    mirbadllm ctl models list | add ID PATH [--served-name N] [--ctx-size N] ... | start ID [--wait]
                         | stop ID | restart ID | remove ID | logs ID [--follow] [--tail N]
    mirbadllm ctl models rm MODEL [--files] [--yes] | du [--node N]                     (ctl_disk)
    mirbadllm ctl models pull REPO[:QUANT]|NAME | import ollama NAME | import folder PATH (ctl_sources)
                         | import lmstudio [--folder PATH] [--all | NAME...]             (ctl_lmstudio)
                         | search WORDS | files REPO | catalog                            (ctl_discover)
                         | mirror MODEL --to NODE                                        (ctl_sources)
                         | plan FILE|REPO[:QUANT] [--node N] [--ctx N]                   (ctl_plan)
                         | updates [--cached] [--all] | update MODEL | rollback MODEL      (ctl_model_updates)
    mirbadllm ctl downloads [list] | pause ID | resume ID | cancel ID | retry ID          (ctl_downloads)
    mirbadllm ctl daemon stop [--stop-models]                                            (ctl_daemon)
    mirbadllm ctl upgrade | upgrade nodes [--folder F | --feed URL]                      (ctl_upgrade)
    mirbadllm ctl keys list | create NAME | limit NAME|ID [--rpm N] [--tokens-per-day N] | revoke NAME|ID (ctl_keys)
    mirbadllm ctl nodes list | discovered | add ADDRESS | pair ADDRESS CODE | remove NODE | rotate-ca   (ctl_nodes)
    mirbadllm ctl bench MODEL | tune MODEL [--full] [--apply] | jobs [MODEL]                 (ctl_jobs)
    mirbadllm ctl services NODE [list [--all] | start|stop|restart NAME [--confirm NAME]]   (ctl_services)
    mirbadllm ctl services allow|disallow NAME [--node NODE] [--protected] | policy        (ctl_services)
    mirbadllm ctl backup create [--passphrase-file F] [--out FILE] | list | restore FILE [--yes]  (ctl_backup)
    mirbadllm ctl audit [--action A] [--subject S] [--since 1h] [--limit N] [--json]       (ctl_audit)
    mirbadllm ctl requests list [--model M] [--key K] [--status 5xx] [--slower-than MS] | show ID  (ctl_requests)
    mirbadllm ctl connect [TOOL [--model M] [--key-name NAME | --key SECRET] [--lan]]   (ctl_connect)
    mirbadllm ctl chats list | show ID | rename ID TITLE | rm ID | export ID [--format md|json] [--out F]  (ctl_chats)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import ValidationError

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.locations import default_home, read_admin_token, read_daemon_url
from daemon.api.models import ModelDefinition
from mirbadllm import (
    ctl_audit,
    ctl_backup,
    ctl_chats,
    ctl_connect,
    ctl_daemon,
    ctl_discover,
    ctl_disk,
    ctl_downloads,
    ctl_jobs,
    ctl_keys,
    ctl_model_updates,
    ctl_nodes,
    ctl_plan,
    ctl_presets,
    ctl_requests,
    ctl_sources,
    ctl_upgrade,
)
from mirbadllm.ctl_services import add_parser as add_services_parser
from mirbadllm.ctl_services import run as run_services


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbadllm ctl", description="Control the MirbadLLM daemon.")
    parser.add_argument("--home", type=Path, default=None, help="the daemon's data directory")
    parser.add_argument("--url", default=None, help="the daemon's admin URL (default: from the home)")
    groups = parser.add_subparsers(dest="group", required=True)
    status = groups.add_parser("status", help="the daemon and every model")
    status.add_argument("-v", "--verbose", action="store_true", help="also say why in full (keys at rest)")

    models = groups.add_parser("models", help="list, add, start, stop, logs").add_subparsers(dest="action", required=True)
    models.add_parser("list")
    add = models.add_parser("add")
    add.add_argument("id")
    add.add_argument("model_path")
    add.add_argument("--served-name")
    add.add_argument("--ctx-size", type=int)
    add.add_argument("--parallel", type=int)
    add.add_argument("--n-gpu-layers", type=int)
    add.add_argument("--embeddings", action="store_true")
    add.add_argument("--auto-start", action="store_true")
    add.add_argument("--start-on-request", action=argparse.BooleanOptionalAction, default=True,
                     help="load it when a request names it (default; --no-start-on-request: only when started)")
    add.add_argument("--tag", action="append", default=[])
    add.add_argument("--node", default="local", help="node to place it on: name, id or id prefix (`ctl nodes list`)")
    add.add_argument("--rpc-node", action="append", default=[], dest="rpc_nodes",
                     help="a helper node holding part of the layers (llama.cpp RPC; `ctl models plan` shows a split)")
    add.add_argument("--memory-budget", type=float, dest="memory_budget_gib", metavar="GIB",
                     help="what the model may take on its node, in GiB (instead of the estimate)")
    for name in ("start", "stop", "restart", "remove"):
        sub = models.add_parser(name)
        sub.add_argument("id")
        if name == "start":
            sub.add_argument("--wait", action="store_true", help="wait until ready or failed")
    logs = models.add_parser("logs")
    logs.add_argument("id")
    logs.add_argument("--tail", type=int, default=100)
    logs.add_argument("--follow", "-f", action="store_true")
    ctl_sources.add_parsers(models)
    ctl_discover.add_parsers(models)
    ctl_disk.add_parsers(models)
    ctl_plan.add_parser(models)
    ctl_presets.add_parser(models)
    ctl_model_updates.add_parsers(models)

    ctl_nodes.add_parser(groups)
    ctl_daemon.add_parser(groups)
    ctl_upgrade.add_parser(groups)
    ctl_jobs.add_parser(groups)
    ctl_keys.add_parser(groups)
    add_services_parser(groups)
    ctl_backup.add_parser(groups)
    ctl_audit.add_parser(groups)
    ctl_requests.add_parser(groups)
    ctl_connect.add_parser(groups)
    ctl_chats.add_parser(groups)
    ctl_downloads.add_parser(groups)
    return parser.parse_args(argv)


def _fmt_model(view_status: object) -> str:
    s = view_status
    state = s.state.value
    extra = f"  pid {s.pid}" if getattr(s, "pid", None) else ""  # type: ignore[attr-defined]
    extra += "  (restart pending)" if getattr(s, "restart_pending", False) else ""
    error = f"\n    {s.error}" if getattr(s, "error", None) else ""  # type: ignore[attr-defined]
    error += f"\n    {s.evicted}" if getattr(s, "evicted", None) else ""  # type: ignore[attr-defined]
    if getattr(s, "stalled", None):
        state, error = "stalled", error + f"\n    stalled {s.stalled}"  # type: ignore[attr-defined]
    elif getattr(s, "slow", None) and state == "ready":
        state, error = "slow", error + f"\n    slow: {s.slow}"  # type: ignore[attr-defined]
    node = getattr(s, "node_name", "") or s.node  # type: ignore[attr-defined]
    if getattr(s, "busy", None):
        state, extra = s.busy.split(" ", 1)[0], extra + f"  {s.busy}"  # type: ignore[attr-defined]
    return f"{s.id:<24} {state:<9} {node:<16} {s.served_name}{extra}{error}"  # type: ignore[attr-defined]


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.group == "status":
        status = await client.status()
        d = status.daemon
        print(f"daemon {d.version}  {d.api_url}  keys {'required' if d.keys_required else 'not required'}")
        if status.keys_at_rest is not None and status.keys_at_rest.warning:  # keys are 0600 files: no keychain
            print(f"warning: {status.keys_at_rest.warning}" if args.verbose else
                  "note: private keys are 0600 files, not in a keychain (`mirbadllm ctl status -v` says why)")
        for model in status.models:
            print(_fmt_model(model))
        return 0
    groups: dict[str, Callable[[argparse.Namespace, DaemonClient], Awaitable[int]]] = {
        "models": _models, "nodes": ctl_nodes.run, "daemon": ctl_daemon.run, "upgrade": ctl_upgrade.run,
        "bench": ctl_jobs.run, "tune": ctl_jobs.run, "jobs": ctl_jobs.run, "services": run_services,
        "backup": ctl_backup.run, "audit": ctl_audit.run, "requests": ctl_requests.run, "connect": ctl_connect.run,
        "chats": ctl_chats.run, "downloads": ctl_downloads.run,
    }
    return await groups.get(args.group, ctl_keys.run)(args, client)


async def _models(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "list":
        for view in await client.list_models():
            print(_fmt_model(view.status))
    elif args.action in ("pull", "import", "mirror"):
        return await ctl_sources.run(args, client)
    elif args.action in ("search", "files", "catalog"):
        return await ctl_discover.run(args, client)
    elif args.action in ("rm", "du"):
        return await ctl_disk.run(args, client)
    elif args.action == "plan":
        return await ctl_plan.run(args, client)
    elif args.action in ("updates", "update", "rollback"):
        return await ctl_model_updates.run(args, client)
    elif args.action == "preset":
        return await ctl_presets.run(args, client)
    elif args.action == "add":
        node = await ctl_nodes.resolve_id(client, args.node)
        settings = LlamaCppSettings(ctx_size=args.ctx_size, parallel=args.parallel,
                                    n_gpu_layers=args.n_gpu_layers, embeddings=args.embeddings)
        definition = ModelDefinition(id=args.id, served_name=args.served_name or args.id,
                                     model_path=str(Path(args.model_path).expanduser().resolve()),
                                     settings=settings, auto_start=args.auto_start,
                                     start_on_request=args.start_on_request, tags=args.tag, node=node,
                                     rpc_nodes=args.rpc_nodes, memory_budget_gib=args.memory_budget_gib)
        view = await client.create_model(definition)
        print(f"added {view.definition.id}" + ("" if node == "local" else f" on node {node[:12]}"))
    elif args.action == "start":
        status = await client.start_model(args.id, wait=args.wait)
        print(_fmt_model(status))
        return 0 if status.state.value in ("ready", "starting") else 1
    elif args.action == "stop":
        print(_fmt_model(await client.stop_model(args.id)))
    elif args.action == "restart":
        print(_fmt_model(await client.restart_model(args.id)))
    elif args.action == "remove":
        await client.delete_model(args.id)
        print(f"removed {args.id}")
    else:
        async for line in client.logs(args.id, tail=args.tail, follow=args.follow):
            print(line, flush=True)
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.group == "connect" and (code := ctl_connect.without_daemon(args)) is not None:
        return code  # the list of tools, or an unknown one: no daemon needed to say so
    return run_with_client(args, run)


def run_with_client(args: argparse.Namespace,
                    body: Callable[[argparse.Namespace, DaemonClient], Awaitable[int]]) -> int:
    """Connect to the daemon of ``args.home`` / ``args.url``, run ``body``, and turn its errors and
    Ctrl-C into messages and exit codes (shared by ``ctl`` and ``mirbadllm run``)."""
    home = (args.home or default_home()).expanduser()
    token = read_admin_token(home)
    if token is None:
        print(f"no admin token in {home}: is the daemon installed there? (--home DIR)", file=sys.stderr)
        return 2
    client = DaemonClient(args.url or read_daemon_url(home), token, client_name="ctl")  # the audit log's actor

    async def go() -> int:
        try:
            return await body(args, client)
        except DaemonError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 1
        except ValidationError as exc:
            print(f"error: {plain_errors(exc)}", file=sys.stderr)
            return 2
        finally:
            await client.close()

    try:
        code = asyncio.run(go())
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ctl jobs | head`: the reader has had enough; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def plain_errors(exc: ValidationError) -> str:
    """pydantic's errors as a person reads them: "ctx_size: Input should be greater than or equal to 0"
    for each, without its type names and documentation links."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors())
