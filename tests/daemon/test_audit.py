"""The audit log through the real admin API: who did what, with the object before and after."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
from pathlib import Path

import aiohttp
import pytest

from daemon.api.audit import changes, summary
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import ApiKeyLimits, DaemonSettings
from daemon.audit.actor import acting_as
from daemon.audit.log import AuditLog, AuditQuery
from daemon.audit.system import record_system_events
from daemon.events import EventBus
from daemon.history import History
from tests.daemon.harness import model, running_daemon


async def test_model_edit_and_key_revocation_name_their_client_and_keep_no_secret(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        app = DaemonClient(d.url, d.daemon.admin_token, client_name="app")
        ctl = DaemonClient(d.url, d.daemon.admin_token, client_name="ctl")
        try:
            view = await app.create_model(model("m", str(model_file), tags=["chat"]))
            settings = view.definition.settings.model_copy(update={"ctx_size": 4096})
            await app.update_model(view.definition.model_copy(update={"settings": settings, "tags": ["chat", "x"]}))
            created = await ctl.create_key("ci")
            await ctl.set_key_limits(created.info.id, ApiKeyLimits(requests_per_minute=30))
            await ctl.revoke_key(created.info.id)
            await d.client.stop_model("m")  # the harness's client names no client

            page = await ctl.audit()
        finally:
            await app.close()
            await ctl.close()
    by_action = {e.action: e for e in page.entries}
    edit = by_action["model.update"]
    assert edit.actor == "app" and edit.subject == "m"
    assert edit.before["settings"]["ctx_size"] != 4096 and edit.after["settings"]["ctx_size"] == 4096
    found = {c.field: (c.old, c.new) for c in changes(edit.before, edit.after)}
    assert found["settings.ctx_size"][1] == 4096 and found["tags"] == (["chat"], ["chat", "x"])
    assert "settings.ctx_size:" in summary(edit) and "→ 4096" in summary(edit)
    assert by_action["model.add"].after["id"] == "m" and by_action["model.add"].actor == "app"

    revoked = by_action["key.revoke"]
    assert revoked.actor == "ctl" and revoked.subject == created.info.id
    assert revoked.before["name"] == "ci" and revoked.before["limits"]["requests_per_minute"] == 30
    assert revoked.after is None
    limits = by_action["key.limits"]
    assert (limits.before["requests_per_minute"], limits.after["requests_per_minute"]) == (None, 30)
    assert by_action["model.stop"].actor == "admin token"
    assert [e.id for e in page.entries] == sorted((e.id for e in page.entries), reverse=True)  # newest first

    # Neither the key's secret nor its hash is anywhere in the database file.
    stored = b"".join(p.read_bytes() for p in (tmp_path / "home").glob("history.sqlite*"))
    assert created.key.encode() not in stored
    assert hashlib.sha256(created.key.encode()).hexdigest().encode() not in stored  # keys.json keeps this


async def test_settings_change_and_retention_setting(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:
        saved = await d.client.put_settings(DaemonSettings(audit_retention_days=7))
        assert saved.audit_retention_days == 7
        assert (await d.client.get_settings()).audit_retention_days == 7
        page = await d.client.audit(action="settings")
    entry = page.entries[0]
    assert entry.action == "settings.update"
    assert (entry.before["audit_retention_days"], entry.after["audit_retention_days"]) == (90, 7)
    assert "config.toml" not in entry.detail
    assert "audit_retention_days = 7" in (tmp_path / "home" / "config.toml").read_text()


async def test_filters_paging_and_bad_queries(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:
        audit = d.daemon.audit
        for n in range(5):
            await audit.record("model.start", f"m{n}", actor="ctl")
        await audit.record("node.remove", "n1", actor="app")
        await audit.record("modelx.odd", "m1", actor="system")

        starts = await d.client.audit(action="model")  # a group: model.* but not modelx.*
        assert {e.action for e in starts.entries} == {"model.start"} and len(starts.entries) == 5
        assert [e.subject for e in (await d.client.audit(subject="m1")).entries] == ["m1", "m1"]
        assert [e.action for e in (await d.client.audit(actor="app")).entries] == ["node.remove"]

        first = await d.client.audit(limit=3)
        assert len(first.entries) == 3 and first.next_before == first.entries[-1].id
        rest = await d.client.audit(limit=3, before=first.next_before)
        assert len(rest.entries) == 3 and rest.entries[0].id < first.entries[-1].id
        last = await d.client.audit(limit=3, before=rest.next_before)
        assert len(last.entries) == 1 and last.next_before is None
        assert await d.client.audit(since=time.time() + 3600) == type(first)(entries=[])

        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as http:
            for query in ("limit=0", "limit=abc", "since=yesterday", "before=-1", "since=20&until=10",
                          "limit=5000"):
                async with http.get(f"{d.url}/api/audit?{query}") as resp:
                    body = await resp.json()
                    assert resp.status == 400, query
                    assert body["error"]["code"] == "invalid_parameter" and body["error"]["type"]


async def test_a_client_cannot_pass_itself_off_as_the_daemon(tmp_path: Path, fake_runtime: Path,
                                                             model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        fake = DaemonClient(d.url, d.daemon.admin_token, client_name="system")
        odd = DaemonClient(d.url, d.daemon.admin_token, client_name="x" * 80)
        wrong = DaemonClient(d.url, "not-the-token", client_name="app")
        try:
            await fake.create_model(model("a", str(model_file)))
            await odd.create_model(model("b", str(model_file)))
            with pytest.raises(DaemonError):
                await wrong.create_model(model("c", str(model_file)))
            page = await d.client.audit(action="model.add")
        finally:
            for client in (fake, odd, wrong):
                await client.close()
    assert {e.subject: e.actor for e in page.entries} == {"a": "admin token", "b": "admin token"}


async def test_retention_drops_old_entries_only(tmp_path: Path) -> None:
    now = [1_000_000.0]
    log = AuditLog(tmp_path / "history.sqlite", clock=lambda: now[0])
    await log.open()
    try:
        await log.record("model.add", "old", actor="app")
        now[0] += 10 * 86400
        await log.record("model.add", "new", actor="app")
        assert await log.prune(7) == 1
        page = await log.query(AuditQuery())
        assert [e.subject for e in page.entries] == ["new"]
    finally:
        await log.close()


async def test_an_older_audit_table_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE audit (ts REAL, actor TEXT, action TEXT, subject TEXT, detail TEXT)")
    db.execute("INSERT INTO audit VALUES (?, 'admin', 'key.revoke', 'k1', '')", (time.time(),))
    db.commit()
    db.close()
    history = History(path)  # the daemon opens both: history first, then the log
    await history.open()
    log = AuditLog(path)
    await log.open()
    history.recorder = log
    try:
        await history.audit("admin", "model.update", "m", before={"x": 1}, after={"x": 2})
        entries = (await log.query(AuditQuery())).entries
        assert [(e.action, e.actor) for e in entries] == [("model.update", "system"), ("key.revoke", "admin token")]
        assert entries[0].after == {"x": 2} and entries[1].before is None
        indexes = {row[1] for row in sqlite3.connect(path).execute("PRAGMA index_list(audit)")}
        assert "audit_ts" in indexes
    finally:
        await log.close()
        await history.close()


async def test_secrets_in_a_snapshot_are_redacted(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "history.sqlite")
    await log.open()
    try:
        await log.record("backup.create", "b1", detail="to sftp://me:pw-789@nas/backups", after={"passphrase": "hunter2", "path": "/x", "nested": {
            "api_token": "tok-123", "api_key_file": "/keys/openai", "certificate_pem": "-----BEGIN..."},
            "tracing": {"endpoint": "https://otel:s3cr3t-pw@collector:4318/v1/traces",
                        "headers": {"x-api-key": "hdr-456"}}, "note": "mail me at a@b.example"})
        entry = (await log.query(AuditQuery())).entries[0]
    finally:
        await log.close()
    assert entry.after["passphrase"] == "[redacted]" and entry.after["path"] == "/x"
    assert entry.after["nested"]["api_token"] == "[redacted]"
    assert entry.after["nested"]["api_key_file"] == "/keys/openai"  # a path is kept; the file is never read
    assert "BEGIN" not in str(entry.after)
    assert entry.after["tracing"] == {"endpoint": "https://otel:[redacted]@collector:4318/v1/traces",
                                      "headers": {"x-api-key": "[redacted]"}}
    assert entry.after["note"] == "mail me at a@b.example"
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("history.sqlite*"))
    assert b"hunter2" not in stored and b"tok-123" not in stored and b"s3cr3t-pw" not in stored
    assert b"hdr-456" not in stored and b"pw-789" not in stored and entry.detail == "to sftp://me:[redacted]@nas/backups"


class _Noting:
    """The real log, and an asyncio.Event per recorded entry for the test to wait on."""

    def __init__(self, log: AuditLog) -> None:
        self.log, self.recorded = log, asyncio.Event()

    async def record(self, action: str, subject: str = "", *, before: object = None, after: object = None,
                     detail: str = "", actor: str | None = None) -> None:
        await self.log.record(action, subject, before=before, after=after, detail=detail, actor=actor)
        self.recorded.set()


async def test_what_the_daemon_does_on_its_own_is_recorded_as_system(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "history.sqlite")
    await log.open()
    bus = EventBus()
    noting = _Noting(log)
    follower = asyncio.get_running_loop().create_task(record_system_events(bus, noting, bus.last_id, poll_s=5))
    try:
        with acting_as("app"):  # an app's start made room: the eviction is still the daemon's
            bus.publish("model.evicted", "small", for_model="big", freed_bytes=1 << 30, reason="needs 6 GiB")
        bus.publish("model.state", "small", state="stopped")  # not an action: not recorded
        bus.publish("model.crashed", "big", crashes=2, restart_in_s=4.0, error="exit 139")
        while True:
            noting.recorded.clear()
            if len((await log.query(AuditQuery())).entries) >= 2:
                break
            await asyncio.wait_for(noting.recorded.wait(), 30)
        entries = (await log.query(AuditQuery())).entries
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await log.close()
    assert [(e.action, e.subject, e.actor) for e in entries] == [("model.crash_restart", "big", "system"),
                                                                ("model.evict", "small", "system")]
    assert entries[1].detail == "to make room for big: needs 6 GiB"
    assert entries[0].detail == "crash 2 in a row, restart in 4 s"
