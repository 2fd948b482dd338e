"""``mirbadllm ctl backup``: back the daemon up, list its backups, restore one (preview first).

    mirbadllm ctl backup create [--passphrase-file F] [--out FILE]
    mirbadllm ctl backup list
    mirbadllm ctl backup restore FILE [--passphrase-file F] [--yes] [--replace-ca] [--no-downloads]

``create`` without ``--out`` writes the backup into the daemon's backup directory; with ``--out``
it writes FILE here (0600). A passphrase (the first line of its file, never an argument: a command
line is seen by every process) adds the CA and secrets, encrypted. ``restore`` shows what would
change, then applies it when confirmed (``--yes``, or ``y`` at the prompt). The preview lists the
models whose file is not on their node; the restore downloads those that can be fetched (their
definition names a Hugging Face file, or the demo package) unless ``--no-downloads``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from core.json_store import write_atomic
from daemon.api.backup import MissingFile, PreviewRow
from daemon.api.client import DaemonClient


def add_parser(groups: Any) -> None:
    backup = groups.add_parser("backup", help="back up and restore the daemon").add_subparsers(
        dest="action", required=True)
    create = backup.add_parser("create", help="make a backup")
    create.add_argument("--passphrase-file", type=Path, help="its first line: encrypts the CA and secrets in")
    create.add_argument("--out", type=Path, help="write it here instead of the daemon's backup directory")
    backup.add_parser("list", help="the backups in the daemon's backup directory")
    restore = backup.add_parser("restore", help="preview, then restore a backup file")
    restore.add_argument("file", type=Path)
    restore.add_argument("--passphrase-file", type=Path, help="the passphrase the backup was made with")
    restore.add_argument("--yes", action="store_true", help="apply without asking")
    restore.add_argument("--replace-ca", action="store_true",
                         help="take the backup's CA even though nodes paired here trust this daemon's own")
    restore.add_argument("--no-downloads", action="store_true",
                         help="do not download the model files missing on their nodes")


def read_passphrase(path: Path | None) -> str | None:
    if path is None:
        return None
    lines = path.expanduser().read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0]:
        raise SystemExit(f"{path}: the passphrase file is empty")
    return lines[0]


def row_text(row: PreviewRow) -> str:
    fields = f" ({', '.join(row.fields)})" if row.fields else ""
    note = f" — {row.note}" if row.note else ""
    return f"  {row.change:<9} {row.kind:<8} {row.label}{fields}{note}"


def file_text(item: MissingFile) -> str:
    how = {"huggingface": "download", "package": "assemble", "by_hand": "copy by hand"}[item.fetch]
    if item.state == "unchecked":
        how = "unchecked"
    size = f" {item.size / 2**30:.2f} GiB" if item.size else ""
    source = f" {item.source}" if item.source and item.fetch != "by_hand" else ""
    transfer = f" [transfer {item.transfer}]" if item.transfer else ""
    return f"  {how:<12} {item.model_id} on {item.node}: {item.path}{source}{size}{transfer} — {item.note}"


def _stamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    if args.action == "create":
        passphrase = read_passphrase(args.passphrase_file)
        if args.out is not None:
            text = await client.create_backup(passphrase)
            write_atomic(args.out.expanduser(), text.encode("utf-8"), 0o600)
            print(f"backup written to {args.out}" + (" (CA and secrets encrypted)" if passphrase else
                                                      " (no secrets: give --passphrase-file to include the CA)"))
        else:
            saved = await client.save_backup(passphrase)
            print(f"backup {saved.name} written ({saved.size} bytes{', encrypted secrets' if saved.encrypted else ''})")
        return 0
    if args.action == "list":
        listing = await client.list_backups()
        print(f"{listing.directory}: daily backups {'on' if listing.enabled else 'off'}, keeping {listing.keep}")
        if listing.last_error:
            print(f"last scheduled backup failed: {listing.last_error}")
        for f in listing.files:
            print(f"  {f.name}  {_stamp(f.created_at)}  {f.size} bytes{'  encrypted' if f.encrypted else ''}")
        return 0
    return await _restore(args, client)


async def _restore(args: argparse.Namespace, client: DaemonClient) -> int:
    text = args.file.expanduser().read_text(encoding="utf-8")
    passphrase = read_passphrase(args.passphrase_file)
    preview = await client.preview_restore(text, passphrase, args.replace_ca)
    print(f"backup of {preview.host or 'a daemon'} from {_stamp(preview.created_at)}"
          + (" (with encrypted CA and secrets)" if preview.encrypted else ""))
    for row in preview.rows:
        print(row_text(row))
    if preview.missing_files:
        print("model files not on their nodes:")
        for item in preview.missing_files:
            print(file_text(item))
    fetchable = not args.no_downloads and any(m.state == "missing" and m.fetch != "by_hand"
                                              for m in preview.missing_files)
    if not any(r.change in ("new", "changed") for r in preview.rows) and not fetchable:
        print("nothing to restore: this daemon already holds all of it")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print("not restored: confirm with --yes", file=sys.stderr)
            return 2
        if input("restore these changes? [y/N] ").strip().lower() not in ("y", "yes"):
            print("not restored")
            return 1
    result = await client.restore_backup(text, passphrase, args.replace_ca, not args.no_downloads)
    print(f"restored: {result.applied} change(s)")
    for item in result.missing_files:
        print(file_text(item))
    if result.transfers:
        print(f"downloads started: {', '.join(result.transfers)} (GET /api/transfers shows their progress)")
    for failure in result.failed:
        print(f"  refused: {failure}")
    if result.restart_required:
        print("restart the daemon (`mirbadllm ctl daemon stop`, then start it) for the CA and nodes to take effect")
    return 1 if result.failed else 0
