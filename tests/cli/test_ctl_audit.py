"""``mirbadllm ctl audit`` against a real daemon: the ctl's own actions show as ``ctl``, the app's as
``app``, with what changed on one line; filters, ``--json`` and bad arguments."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from daemon.api.client import DaemonClient
from mirbadllm import ctl
from mirbadllm.ctl_audit import parse_when
from tests.daemon.harness import model, running_daemon


async def _ctl(home: Path, *argv: str) -> int:
    """The real ``mirbadllm ctl`` (its own client, token and URL from the home), off the test's loop."""
    return await asyncio.to_thread(ctl.main, ["--home", str(home), *argv])


async def test_ctl_audit_lists_who_changed_what(tmp_path: Path, fake_runtime: Path, model_file: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    async with running_daemon(home, fake_runtime) as rd:
        app = DaemonClient(rd.url, rd.daemon.admin_token, client_name="app")
        try:
            view = await app.create_model(model("coder", str(model_file)))
            settings = view.definition.settings.model_copy(update={"ctx_size": 16384})
            await app.update_model(view.definition.model_copy(update={"settings": settings}))
        finally:
            await app.close()
        assert await _ctl(home, "keys", "create", "ci-bot") == 0
        key_id = (await rd.client.list_keys())[0].id
        assert await _ctl(home, "keys", "revoke", key_id) == 0
        capsys.readouterr()

        assert await _ctl(home, "audit") == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["TIME", "WHO", "ACTION", "SUBJECT", "WHAT", "CHANGED"]
        rows = {line.split()[3]: line for line in lines[1:]}  # the action column (time is two words)
        assert "ctl" in rows["key.revoke"].split() and key_id in rows["key.revoke"] and "name=ci-bot" in rows["key.revoke"]
        assert "app" in rows["model.update"].split() and "settings.ctx_size:" in rows["model.update"]
        assert "→ 16384" in rows["model.update"]
        assert [line.split()[3] for line in lines[1:]][:2] == ["key.revoke", "key.create"]  # newest first

        assert await _ctl(home, "audit", "--action", "model", "--since", "1h", "--limit", "1") == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and lines[1].split()[3] == "model.update"

        assert await _ctl(home, "audit", "--subject", key_id, "--json") == 0
        entries = json.loads(capsys.readouterr().out)
        assert [(e["action"], e["actor"]) for e in entries] == [("key.revoke", "ctl"), ("key.create", "ctl")]
        assert entries[0]["before"]["name"] == "ci-bot" and "sha256" not in entries[0]["before"]

        assert await _ctl(home, "audit", "--actor", "nobody") == 0
        assert capsys.readouterr().out.strip() == "no audit entries match"
        with pytest.raises(SystemExit) as bad:
            await _ctl(home, "audit", "--since", "yesterday")
        assert bad.value.code == 2
        assert "neither an age" in capsys.readouterr().err


def test_ages_and_dates() -> None:
    assert parse_when("90s", now=1000.0) == 910.0
    assert parse_when("2d", now=200_000.0) == 200_000.0 - 2 * 86400
    assert parse_when("2026-12-01T10:00") > parse_when("2026-11-30")
