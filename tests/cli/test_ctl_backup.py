"""``mirbadllm ctl backup``: create (into a file, into the daemon's directory), list, and restore
into a fresh daemon with the preview shown first and nothing applied unless confirmed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, model, running_daemon


async def _ctl(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(list(argv)), rd.client)


async def test_ctl_backs_up_lists_and_restores_into_a_fresh_daemon(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("a long enough passphrase\n")
    out = tmp_path / "backup.json"
    async with running_daemon(tmp_path / "old", None, local_agent=False) as old:
        await old.client.create_model(model("gpt", runtime="external", base_url="https://api.example.com/v1",
                                            provider_model="gpt-4o"))
        secret = (await old.client.create_key("laptop")).key
        assert await _ctl(old, "backup", "create", "--passphrase-file", str(passphrase), "--out", str(out)) == 0
        assert "CA and secrets encrypted" in capsys.readouterr().out
        assert out.stat().st_mode & 0o777 == 0o600 and secret not in out.read_text()
        assert await _ctl(old, "backup", "create") == 0
        name = capsys.readouterr().out.split()[1]
        assert await _ctl(old, "backup", "list") == 0
        listing = capsys.readouterr().out
        assert name in listing and "daily backups on, keeping 7" in listing

    async with running_daemon(tmp_path / "new", None, local_agent=False) as new:
        monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal to confirm on
        assert await _ctl(new, "backup", "restore", str(out), "--passphrase-file", str(passphrase)) == 2
        shown = capsys.readouterr()
        assert "new       model    gpt" in shown.out and "confirm with --yes" in shown.err
        assert await new.client.list_models() == []  # the preview changed nothing

        wrong = tmp_path / "wrong"
        wrong.write_text("not the passphrase\n")
        with pytest.raises(DaemonError) as caught:
            await _ctl(new, "backup", "restore", str(out), "--passphrase-file", str(wrong), "--yes")
        assert caught.value.code == "backup_wrong_passphrase"

        assert await _ctl(new, "backup", "restore", str(out), "--passphrase-file", str(passphrase), "--yes") == 0
        assert "restored:" in capsys.readouterr().out
        assert [m.definition.id for m in await new.client.list_models()] == ["gpt"]
        assert [k.name for k in await new.client.list_keys()] == ["laptop"]
        assert await _ctl(new, "backup", "restore", str(out), "--passphrase-file", str(passphrase), "--yes") == 0
        assert "nothing to restore" in capsys.readouterr().out


async def test_ctl_restore_lists_the_missing_model_files_and_downloads_unless_told_not_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        fake_runtime: Path) -> None:
    from tests.daemon.test_backup_files import FILE, REPO, _backup_of_another_machine
    from tests.daemon.test_sources_api import transfer_end
    from tests.fakes.fake_hf_hub import FakeHub
    from tests.fakes.gguf_files import gguf_bytes

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.hub_url)
    hub.add(REPO, FILE, gguf_bytes())
    out = tmp_path / "backup.json"
    out.write_text(_backup_of_another_machine(tmp_path / "elsewhere"))
    try:
        async with running_daemon(tmp_path / "new", fake_runtime) as new:
            since = (await new.client.status()).last_event_id
            assert await _ctl(new, "backup", "restore", str(out), "--yes", "--no-downloads") == 1  # far: no node box
            shown = capsys.readouterr().out
            assert "model files not on their nodes:" in shown
            assert f"download     tiny on local: {tmp_path / 'elsewhere' / FILE} hf:{REPO}/{FILE}@main" in shown
            assert "copy by hand mine on local:" in shown and "unchecked    far on box:" in shown
            assert "downloads started" not in shown and await new.client.transfers() == []

            await _ctl(new, "backup", "restore", str(out), "--yes")  # the models are here; their files are not
            shown = capsys.readouterr().out
            assert "nothing to restore" not in shown and "downloads started: x1" in shown
            done, _ = await transfer_end(new.client, "x1", since)
            assert done.state.value == "done" and done.registered == ["tiny"]
    finally:
        await hub.close()
