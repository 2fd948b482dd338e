"""Restore: a read-only preview of what a backup would change, then the same plan applied.

Every change is made through the part that owns it: ``Registry.add``/``update`` for models,
``KeyStore.import_records`` for API keys (merged by id and hash), ``NodeStore.put`` for nodes,
``Listener.apply`` for settings (saved to config.toml), ``daemon.backup.ca`` for the CA. A restore
merges: what this daemon has and the backup lacks stays.

The CA. A backup made with a passphrase carries the CA and the daemon's client identity (which
paired agents pin). Both replace this daemon's own when this
daemon has no paired node the backup's CA did not sign (a fresh home, or this same fleet), or
when the request asks for it (``replace_ca``, fleet recovery); otherwise this daemon keeps its CA,
because replacing it would cut off the nodes it paired itself. A node is restored only when the
CA in effect after the restore signed its certificate, so the daemon trusts it at the next start.
A replaced CA, and restored nodes, take effect when the daemon starts again (``restart_required``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.json_store import write_atomic
from daemon.api.backup import BackupKey, BackupSecrets, PreviewRow
from daemon.api.models import DaemonSettings, ModelDefinition
from daemon.backup import ca as backup_ca
from daemon.backup.document import ParsedBackup
from daemon.config import DaemonConfig
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.keys import KeyStore
from daemon.models.registry import Registry, normalize
from daemon.nodes.store import NodeRecord, NodeStore, issued_by

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Owners:
    """The parts a restore writes through."""

    registry: Registry
    keys: KeyStore
    nodes: NodeStore
    config: DaemonConfig
    apply_settings: Callable[[DaemonSettings], Awaitable[None]]  # Listener.apply: saved, and in effect
    pki_dir: Path
    events: EventBus


@dataclass
class Plan:
    rows: list[PreviewRow] = field(default_factory=list)
    key_files: dict[str, str] = field(default_factory=dict)
    ca: Any = None  # BackupCa to install
    client: Any = None  # the daemon client identity (BackupCa) that comes with it
    ca_cert: Any = None
    nodes: list[NodeRecord] = field(default_factory=list)
    models: list[tuple[ModelDefinition, bool]] = field(default_factory=list)  # (definition, is new)
    definitions: list[ModelDefinition] = field(default_factory=list)  # every model the backup holds (its files checked)
    keys: list[BackupKey] = field(default_factory=list)
    settings: DaemonSettings | None = None


def _differing(current: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(current) | set(wanted) if current.get(k) != wanted.get(k))


def _row(plan: Plan, kind: Any, id_: str, label: str, current: dict[str, Any] | None, wanted: dict[str, Any],
         note: str | None = None) -> bool:
    """Add the row; True when something is to change."""
    if current is None:
        plan.rows.append(PreviewRow(kind=kind, id=id_, label=label, change="new", note=note))
        return True
    fields = _differing(current, wanted)
    plan.rows.append(PreviewRow(kind=kind, id=id_, label=label, change="changed" if fields else "identical",
                                fields=fields, note=note))
    return bool(fields)


def plan_restore(owners: Owners, parsed: ParsedBackup, secrets: BackupSecrets | None, replace_ca: bool) -> Plan:
    """What the restore would change (reads only)."""
    plan, doc = Plan(), parsed.document
    wanted_files = {m.get("api_key_file") for m in doc.models if isinstance(m, dict)}
    trusted = _plan_ca(owners, plan, secrets, replace_ca, len(doc.nodes))
    for path, content in sorted((secrets.key_files if secrets else {}).items()):
        if path not in wanted_files or not os.path.isabs(path):
            continue
        refused = key_file_refusal(path, owners.pki_dir.parent)
        if refused is not None:
            plan.rows.append(PreviewRow(kind="secret", id=path, label=f"key file {path}", change="skipped",
                                        note=f"not written: {refused}; put the key in this file by hand"))
            continue
        try:
            current = Path(path).read_text(encoding="utf-8")
        except OSError:
            current = None
        if _row(plan, "secret", path, f"key file {path}", None if current is None else {"content": current},
                {"content": content}):
            plan.key_files[path] = content
    if secrets is None:
        _missing_key_files(plan, wanted_files, parsed.encrypted)
    _plan_nodes(owners, plan, doc.nodes, trusted)
    _plan_models(owners, plan, doc.models)
    for record in doc.keys:
        mine = owners.keys.match(record)
        if mine is not None and mine.id != record.id:
            plan.rows.append(PreviewRow(kind="key", id=record.id, label=record.name, change="identical",
                                        note=f"the same key is here as {mine.id}"))
        elif _row(plan, "key", record.id, record.name, None if mine is None else mine.model_dump(),
                  record.model_dump()):
            plan.keys.append(record)
    _plan_settings(owners, plan, doc.settings)
    return plan


def key_file_refusal(path: str, home: Path) -> str | None:
    """Why a restore does not write a key file at ``path`` (None: it may). A backup is a file
    someone hands over: its key files must not become a way to write the daemon's own files
    (config, CA, the local agent's pins), a dotfile (shell start-up files, ~/.ssh, autostart) or
    through a symbolic link to somewhere else."""
    if "\x00" in path or os.path.normpath(path) != path:
        return "not a plain absolute path"
    parts = Path(path).parts
    if any(part.startswith(".") for part in parts[1:]):
        return "a hidden file or folder (dotfiles are never written from a backup)"
    real_home = os.path.realpath(home)
    if os.path.commonpath([os.path.realpath(path), real_home]) == real_home:
        return "inside the daemon's home"
    if os.path.realpath(path) != path:
        return "a symbolic link is on the way"
    if os.path.lexists(path) and not os.path.isfile(path):
        return "not a regular file"
    return None


def _plan_ca(owners: Owners, plan: Plan, secrets: BackupSecrets | None, replace_ca: bool, node_count: int) -> Any:
    """The CA row; returns the certificate the nodes must be signed by after the restore."""
    current_cert = backup_ca.current_cert(owners.pki_dir)
    if secrets is None or secrets.ca is None:
        if secrets is None and node_count:
            plan.rows.append(PreviewRow(kind="ca", id="ca", label="certificate authority", change="skipped",
                                        note="not in this restore: give the backup's passphrase to restore the CA"))
        return current_cert
    try:
        backup_cert = backup_ca.check_ca(secrets.ca)
    except ValueError as exc:
        plan.rows.append(PreviewRow(kind="ca", id="ca", label="certificate authority", change="skipped",
                                    note=str(exc)))
        return current_cert
    if current_cert is not None and current_cert == backup_cert:
        plan.rows.append(PreviewRow(kind="ca", id="ca", label="certificate authority", change="identical"))
        return current_cert
    foreign = [n for n in owners.nodes.all() if not issued_by(n.certificate_pem, backup_cert)]
    if foreign and not replace_ca:
        plan.rows.append(PreviewRow(kind="ca", id="ca", label="certificate authority", change="skipped",
                                    note=f"kept: {len(foreign)} node(s) paired here trust this daemon's own CA; "
                                         "restore with replace_ca (fleet recovery) to take the backup's"))
        return current_cert
    plan.rows.append(PreviewRow(kind="ca", id="ca", label="certificate authority", change="changed",
                                fields=["key", "certificate"], note="replaced; in effect at the daemon's next start"))
    plan.ca, plan.client, plan.ca_cert = secrets.ca, secrets.daemon_client, backup_cert
    return backup_cert


def _missing_key_files(plan: Plan, paths: set[Any], encrypted: bool) -> None:
    """Say which external models' key files a restore without the secrets leaves missing."""
    for path in sorted(p for p in paths if isinstance(p, str)):
        if not os.path.exists(path):
            note = ("in the backup's encrypted section: give its passphrase" if encrypted else
                    "not in this backup (made without a passphrase): put the key in this file")
            plan.rows.append(PreviewRow(kind="secret", id=path, label=f"key file {path}", change="skipped", note=note))


def _plan_nodes(owners: Owners, plan: Plan, nodes: list[dict[str, Any]], trusted: Any) -> None:
    for raw in nodes:
        try:
            record = NodeRecord.model_validate(raw)
        except ValidationError:
            plan.rows.append(PreviewRow(kind="node", id=str(raw.get("id", "?")), label=str(raw.get("name", "?")),
                                        change="skipped", note="not a node record this daemon reads"))
            continue
        if trusted is None or not issued_by(record.certificate_pem, trusted):
            plan.rows.append(PreviewRow(kind="node", id=record.id, label=record.name, change="skipped",
                                        note="signed by another CA: restore with the passphrase, or pair it again"))
            continue
        current = owners.nodes.get(record.id)
        if _row(plan, "node", record.id, record.name, None if current is None else current.model_dump(),
                record.model_dump(), note="connects at the daemon's next start"):
            plan.nodes.append(record)


def _plan_models(owners: Owners, plan: Plan, models: list[dict[str, Any]]) -> None:
    for raw in models:
        try:
            definition = normalize(ModelDefinition.model_validate(raw))
        except ValidationError:
            plan.rows.append(PreviewRow(kind="model", id=str(raw.get("id", "?")), label=str(raw.get("id", "?")),
                                        change="skipped", note="not a model definition this daemon reads"))
            continue
        key_file, mine = definition.api_key_file, {d.api_key_file for d in owners.registry.all()}
        refused = key_file_refusal(key_file, owners.pki_dir.parent) if key_file and key_file not in mine else None
        if refused is not None:  # its key would be read from that file and sent to the model's base_url
            plan.rows.append(PreviewRow(kind="model", id=definition.id, label=definition.served_name,
                                        change="skipped", note=f"its api_key_file {key_file}: {refused}; a "
                                        "backup never points a model at such a file: add the model by hand"))
            continue
        plan.definitions.append(definition)
        current = owners.registry.get(definition.id)
        if _row(plan, "model", definition.id, definition.served_name,
                None if current is None else current.model_dump(mode="json"), definition.model_dump(mode="json")):
            plan.models.append((definition, current is None))


def _plan_settings(owners: Owners, plan: Plan, saved: dict[str, Any]) -> None:
    current = owners.config.settings().model_dump(mode="json")
    known = {k: v for k, v in saved.items() if k in DaemonSettings.model_fields}
    try:
        wanted = DaemonSettings.model_validate({**current, **known})
    except ValidationError:
        plan.rows.append(PreviewRow(kind="settings", id="settings", label="settings", change="skipped",
                                    note="the backup's settings are not valid here"))
        return
    if _row(plan, "settings", "settings", "settings", current, wanted.model_dump(mode="json")):
        plan.settings = wanted


@dataclass
class Applied:
    applied: int = 0
    failed: list[str] = field(default_factory=list)
    restart_required: bool = False


async def apply_plan(owners: Owners, plan: Plan) -> Applied:
    """Make the plan's changes, in the order each needs: key files and the CA, nodes (models are
    placed on them), models, keys, settings. An item its owner refuses is reported, the rest go on."""
    done = Applied()
    for path, content in plan.key_files.items():
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(Path(path), content.encode("utf-8"), 0o600)
            done.applied += 1
        except OSError as exc:
            done.failed.append(f"key file {path}: {exc.strerror or exc}")
    if plan.ca is not None:
        try:
            backup_ca.replace_ca(owners.pki_dir, plan.ca)
            if plan.client is not None:  # the certificate the paired agents pin
                backup_ca.replace_client(owners.pki_dir, plan.client, plan.ca_cert)
            done.applied += 1
            done.restart_required = True
        except (OSError, ValueError) as exc:
            done.failed.append(f"certificate authority: {exc}")
    for record in plan.nodes:
        await owners.nodes.put(record)
        done.applied += 1
        done.restart_required = True
    for definition, new in plan.models:
        try:
            saved = await (owners.registry.add(definition) if new else owners.registry.update(definition))
        except DaemonProblem as exc:
            done.failed.append(f"model {definition.id}: {exc.message}")
            continue
        owners.events.publish("model.added" if new else "model.updated", saved.id)
        done.applied += 1
    if plan.keys:
        done.applied += owners.keys.import_records(plan.keys)
        owners.events.publish("keys.changed")
    if plan.settings is not None:
        await owners.apply_settings(plan.settings)
        owners.events.publish("settings.changed", **plan.settings.model_dump(mode="json"))
        done.applied += 1
    return done
