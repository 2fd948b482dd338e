"""Backup and restore through the admin API of real daemons: a round trip into a fresh home, each
refusal (nothing changes, the code says why), the preview's rows, and the daily schedule's prune."""

from __future__ import annotations

import base64
import json
import logging
import os
import tomllib
from pathlib import Path

import aiohttp
import pytest

from daemon.api.backup import BackupSettings
from daemon.api.client import DaemonError
from daemon.api.models import DaemonSettings
from daemon.nodes.store import NodeRecord
from daemon.pki import cert_pem, fingerprint, key_pem, new_key
from tests.daemon.harness import RunningDaemon, model, running_daemon

PASSPHRASE = "correct horse battery staple"


async def _pair_fake_node(rd: RunningDaemon, name: str = "box") -> NodeRecord:
    """A node record as pairing leaves it: an agent certificate this daemon's CA signed, pinned."""
    ca = rd.daemon.nodes.ca
    assert ca is not None
    cert = ca.sign(new_key().public_key(), name, server=True, client=False, hosts=["127.0.0.1"])
    record = NodeRecord(id=fingerprint(cert), name=name, host="127.0.0.1", port=9, certificate_pem=cert_pem(cert).decode(),
                        pairing_fingerprint="ab" * 32, hostname=name, paired_at=1.0)
    await rd.daemon.nodes.store.put(record)
    return record


async def _v1_models(rd: RunningDaemon, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as s, s.get(f"{rd.v1}/models", headers=headers) as r:
        return r.status


async def _source(rd: RunningDaemon, model_file: Path, key_file: Path) -> tuple[str, NodeRecord]:
    await rd.client.create_model(model("chat", str(model_file), tags=["chat"]))
    await rd.client.create_model(model("gpt", runtime="external", base_url="https://api.example.com/v1",
                                       provider_model="gpt-4o", api_key_file=str(key_file), node="local"))
    created = await rd.client.create_key("laptop")
    await rd.client.put_settings(DaemonSettings(require_api_keys=True))
    return created.key, await _pair_fake_node(rd)


async def test_a_backup_restores_into_a_fresh_home_and_the_old_key_works(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    key_file = tmp_path / "secrets" / "openai.key"
    key_file.parent.mkdir()
    key_file.write_text("sk-provider-SECRET-123\n")
    async with running_daemon(tmp_path / "old", fake_runtime) as old:
        secret, node = await _source(old, model_file, key_file)
        text = await old.client.create_backup(PASSPHRASE)
        ca_key = key_pem(old.daemon.nodes.ca.key) if old.daemon.nodes.ca else b""
        ca_cert = (tmp_path / "old" / "pki" / "ca.crt").read_bytes()
        client_cert = (tmp_path / "old" / "pki" / "daemon-client.crt").read_bytes()  # what paired agents pin
    raw = text.encode()
    body = b"".join(ca_key.splitlines()[1:-1])
    assert secret.encode() not in raw and body and body not in raw and b"SECRET-123" not in raw
    assert b"BEGIN PRIVATE KEY" not in raw

    key_file.unlink()  # the new machine has no key file yet: the encrypted section brings it back
    new_home = tmp_path / "new"
    async with running_daemon(new_home, fake_runtime) as new:
        blind = {(r.kind, r.id): r for r in (await new.client.preview_restore(text)).rows}  # no passphrase
        assert blind[("secret", str(key_file))].change == "skipped"
        assert "passphrase" in (blind[("secret", str(key_file))].note or "")
        assert blind[("ca", "ca")].change == "skipped" and blind[("node", node.id)].change == "skipped"
        assert await _v1_models(new, secret) in (200,)  # keys not required yet, any key passes
        preview = await new.client.preview_restore(text, PASSPHRASE)
        changes = {(r.kind, r.id): r.change for r in preview.rows}
        assert changes[("model", "chat")] == "new" and changes[("model", "gpt")] == "new"
        assert changes[("node", node.id)] == "new" and changes[("ca", "ca")] == "changed"
        assert changes[("secret", str(key_file))] == "new"
        assert [m.definition.id for m in await new.client.list_models()] == []  # a preview changes nothing

        result = await new.client.restore_backup(text, PASSPHRASE)
        assert result.failed == [] and result.restart_required
        assert sorted(m.definition.id for m in await new.client.list_models()) == ["chat", "gpt"]
        assert await _v1_models(new, None) == 401  # keys are required again...
        assert await _v1_models(new, secret) == 200  # ...and the old key is one of them
        assert key_file.read_text() == "sk-provider-SECRET-123\n" and key_file.stat().st_mode & 0o777 == 0o600
        assert node.id in [n.id for n in await new.client.list_nodes()]
        assert (new_home / "pki" / "ca.crt").read_bytes() == ca_cert
        assert (new_home / "pki" / "daemon-client.crt").read_bytes() == client_cert
        [entry] = (await new.client.audit(action="backup.restore")).entries
        assert "model chat" in entry.after["changed"] and PASSPHRASE not in json.dumps(entry.model_dump())
    assert tomllib.loads((new_home / "config.toml").read_text())["require_api_keys"] is True  # saved
    # The harness takes its config from the test, not config.toml: say what the next start reads
    # (without a local agent: nothing asked of this start needs one, and it starts in a tenth of the time).
    async with running_daemon(new_home, None, local_agent=False, require_api_keys=True) as again:
        assert await _v1_models(again, None) == 401
        assert (new_home / "pki" / "daemon-client.crt").read_bytes() == client_cert  # kept, not reissued
        assert again.daemon.links.get(node.id) is not None  # the restored node is trusted and linked
        assert await _v1_models(again, secret) == 200
        again_preview = await again.client.preview_restore(text, PASSPHRASE)
        assert {r.change for r in again_preview.rows} == {"identical"}, [r for r in again_preview.rows if r.change != "identical"]


def _tamper(text: str, **change: object) -> str:
    doc = json.loads(text)
    for path, value in change.items():
        target = doc
        *parents, leaf = path.split("__")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[leaf] = value
    return json.dumps(doc)


def _flip_ciphertext(text: str) -> str:
    doc = json.loads(text)
    data = bytearray(base64.b64decode(doc["secrets"]["ciphertext"]))
    data[5] ^= 0x01
    doc["secrets"]["ciphertext"] = base64.b64encode(bytes(data)).decode()
    return json.dumps(doc)


async def test_each_refusal_names_its_reason_and_changes_nothing(
        tmp_path: Path, model_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_daemon(tmp_path / "old", None, local_agent=False) as old:
        await old.client.create_key("laptop")
        text = await old.client.create_backup(PASSPHRASE)
        with pytest.raises(DaemonError) as short:
            await old.client.create_backup("short")
        assert short.value.code == "passphrase_too_short" and "short" not in short.value.message.split()
    async with running_daemon(tmp_path / "new", None, local_agent=False) as new:
        ca_before = (tmp_path / "new" / "pki" / "ca.crt").read_bytes()
        cases = {
            "backup_wrong_passphrase": (text, "not the passphrase"),
            "backup_tampered": (_flip_ciphertext(text), PASSPHRASE),
            "backup_weak_kdf": (_tamper(text, secrets__kdf__n=2**14), PASSPHRASE),
            "backup_unknown_version": (_tamper(text, version=99), PASSPHRASE),
            "backup_invalid_json": (text[: len(text) // 2], PASSPHRASE),
        }
        plain_edit = _tamper(text, keys__0__name="someone else")  # the plain sections are bound too
        cases_seen = {}
        for code, (document, passphrase) in [*cases.items(), ("backup_tampered", (plain_edit, PASSPHRASE))]:
            for call in (new.client.preview_restore, new.client.restore_backup):
                with pytest.raises(DaemonError) as caught:
                    await call(document, passphrase)
                cases_seen[code] = caught.value.code
                assert caught.value.code == code, (code, caught.value.message)
                assert PASSPHRASE not in caught.value.message
        assert await new.client.list_keys() == []
        assert (tmp_path / "new" / "pki" / "ca.crt").read_bytes() == ca_before
        events = await new.client.events(0, timeout=0)
        assert not [e for e in events.events if e.type == "backup.restored"]
    assert PASSPHRASE not in caplog.text and "not the passphrase" not in caplog.text  # never logged


async def test_the_preview_says_new_changed_and_identical_with_the_fields(
        tmp_path: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        await rd.client.create_model(model("alpha", runtime="external", base_url="https://a.example/v1",
                                           provider_model="a"))
        await rd.client.create_model(model("beta", runtime="external", base_url="https://b.example/v1",
                                           provider_model="b"))
        key = await rd.client.create_key("laptop")
        text = await rd.client.create_backup()  # no passphrase: no secrets section at all
        assert json.loads(text)["secrets"] is None
        alpha = (await rd.client.get_model("alpha")).definition
        await rd.client.update_model(alpha.model_copy(update={"tags": ["changed"], "provider_model": "a2"}))
        await rd.client.delete_model("beta")
        await rd.client.put_settings(DaemonSettings(require_api_keys=True))
        preview = await rd.client.preview_restore(text)
        rows = {(r.kind, r.id): r for r in preview.rows}
        assert rows[("model", "alpha")].change == "changed"
        assert rows[("model", "alpha")].fields == ["provider_model", "tags"]
        assert rows[("model", "beta")].change == "new"
        assert rows[("key", key.info.id)].change == "identical"
        assert rows[("settings", "settings")].change == "changed"
        assert rows[("settings", "settings")].fields == ["require_api_keys"]
        assert not preview.encrypted and ("ca", "ca") not in rows
        result = await rd.client.restore_backup(text)
        assert result.failed == [] and not result.restart_required
        assert (await rd.client.get_model("alpha")).definition.provider_model == "a"
        assert (await rd.client.get_settings()).require_api_keys is False


async def test_scheduled_backups_prune_to_keep_and_a_failure_is_an_event(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        directory = tmp_path / "backups"
        directory.mkdir()
        await rd.client.put_settings(DaemonSettings(backup=BackupSettings(directory=str(directory), keep=2)))
        scheduler = rd.daemon.backup_scheduler
        names = []
        for n in range(3):
            saved = await scheduler.run_once()
            assert saved is not None
            names.append(saved.name)
            os.utime(directory / saved.name, (1_000_000 + n, 1_000_000 + n))  # one a day, as it were
        listing = await rd.client.list_backups()
        assert [f.name for f in listing.files] == [names[2], names[1]]  # the oldest was pruned
        assert all(not f.encrypted for f in listing.files)  # no passphrase file: no secrets
        assert b"ciphertext" not in (directory / names[2]).read_bytes()
        assert await rd.client.download_backup(names[2]) == (directory / names[2]).read_text()
        assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]

        passphrase_file = tmp_path / "passphrase"
        passphrase_file.write_text(PASSPHRASE + "\n")
        await rd.client.put_settings(DaemonSettings(backup=BackupSettings(
            directory=str(directory), keep=2, passphrase_file=str(passphrase_file))))
        encrypted = await scheduler.run_once()
        assert encrypted is not None and encrypted.encrypted
        preview = await rd.client.preview_restore((directory / encrypted.name).read_text(), PASSPHRASE)
        assert preview.encrypted

        await rd.client.put_settings(DaemonSettings(backup=BackupSettings(directory=str(tmp_path / "gone"))))
        start = (await rd.client.status()).last_event_id
        assert await scheduler.run_once() is None  # the share is not there: recorded, not raised
        events = (await rd.client.events(start, timeout=0)).events
        failed = [e for e in events if e.type == "backup.failed"]
        assert failed and "does not exist" in failed[0].data["reason"]
        assert (await rd.client.list_backups()).last_error
