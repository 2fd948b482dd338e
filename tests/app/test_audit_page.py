"""The Audit page against the real daemon: the log newest first, filters, the
change of the selected entry (field, before, after), and new entries as the daemon announces changes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import cells

from app.ui.main_window import MainWindow
from app.viewmodels.audit import AuditFilters, AuditViewModel, diff
from app.viewmodels.fleet import FleetViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import DaemonSettings, ModelDefinition
from daemon.nodes.store import NodeRecord


@pytest.fixture
def client(real_daemon: Any) -> Iterator[DaemonClient]:
    """The app's client of the real daemon with alpha and beta (Beta-7B), no keys, its settings as at
    first and its audit log empty."""
    real_daemon.hold_models(ModelDefinition(id="alpha", served_name="alpha", model_path="/models/alpha.gguf",
                                            tags=["chat"]),
                            ModelDefinition(id="beta", served_name="Beta-7B", model_path="/models/beta.gguf",
                                            tags=["code", "chat"]))

    async def reset(deps: Any) -> None:
        for key in deps.keys.list():
            deps.keys.revoke(key.id)
        await deps.listener.apply(DaemonSettings.model_validate(DaemonSettings().model_dump()))
        await deps.audit.prune(0, now=time.time() + 60)

    real_daemon.call(reset)
    yield DaemonClient(*real_daemon, client_name="app")


def _note(real_daemon: Any, action: str, subject: str, actor: str, **change: Any) -> None:
    """An entry in the daemon's audit log, as its parts record one."""
    real_daemon.call(lambda deps: deps.audit.record(action, subject, actor=actor, **change))


def _definition(client: DaemonClient, qtbot: Any, model_id: str) -> ModelDefinition:
    got = asyncio.ensure_future(client.get_model(model_id))
    qtbot.waitUntil(got.done, timeout=10_000)
    return got.result().definition


@pytest.fixture
def window(client: DaemonClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(client)


async def test_the_view_model_filters_pages_and_diffs(real_daemon: Any, client: DaemonClient) -> None:
    for n in range(5):
        _note(real_daemon, "model.start", f"m{n}", actor="ctl")
    _note(real_daemon, "model.evict", "m1", actor="system")
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    audit = AuditViewModel(fleet)
    await audit.refresh()
    assert [e.action for e in audit.state.value.entries][:2] == ["model.evict", "model.start"]
    await audit.set_filters(AuditFilters(actor="system"))
    assert [(e.action, e.subject) for e in audit.state.value.entries] == [("model.evict", "m1")]
    await audit.set_filters(AuditFilters(action="model", subject="m1"))
    assert len(audit.state.value.entries) == 2
    with pytest.raises(ValueError):
        await audit.set_filters(AuditFilters(since="forever"))

    definition = (await client.get_model("alpha")).definition
    await client.update_model(definition.model_copy(update={"tags": ["chat", "new"], "auto_start": True}))
    await audit.set_filters(AuditFilters(action="model.update"))
    [edit] = audit.state.value.entries
    assert edit.actor == "app"
    rows = {r.field: (r.before, r.after) for r in diff(edit)}
    assert rows == {"auto_start": ("false", "true"), "tags": ('["chat"]', '["chat", "new"]')}
    await client.close()


@pytest.mark.gui
def test_the_audit_page_lists_filters_and_shows_a_change(window: MainWindow, client: DaemonClient,
                                                         real_daemon: Any, qtbot: Any) -> None:
    k9 = real_daemon.call(lambda deps: deps.keys.create("old-laptop")).info.id
    window.show_page("audit")
    page = window.audit
    qtbot.waitUntil(lambda: page.note.text() == "Nothing has been changed yet.")

    # Changes made elsewhere (here straight on the daemon) show up as the daemon announces them.
    window.ctx.act(client.update_model(_definition(client, qtbot, "beta").model_copy(update={"tags": ["code"]})))
    qtbot.waitUntil(lambda: page.table.rowCount() == 1)
    window.ctx.act(client.revoke_key(k9))
    qtbot.waitUntil(lambda: page.table.rowCount() == 2)
    rows = cells(page.table)
    assert [r[1:4] for r in rows] == [["app", "key.revoke", k9], ["app", "model.update", "beta"]]
    assert "tags:" in rows[1][4] and "→" in rows[1][4]
    assert rows[0][4].startswith("- name=old-laptop")

    page.table.selectRow(1)
    qtbot.waitUntil(lambda: page.diff.rowCount() == 1)
    assert cells(page.diff) == [["tags", '["code", "chat"]', '["code"]']]
    assert page.heading.text().startswith("model.update beta by app at ")

    page.table.selectRow(0)  # a revoked key: its record before, nothing after
    qtbot.waitUntil(lambda: "name" in [r[0] for r in cells(page.diff)])
    assert ["name", "old-laptop", ""] in cells(page.diff)

    page.action.setText("model")
    page.apply_filters()
    qtbot.waitUntil(lambda: page.table.rowCount() == 1)
    assert cells(page.table)[0][2] == "model.update"
    page.actor.setCurrentIndex(page.actor.findData("system"))
    qtbot.waitUntil(lambda: page.table.rowCount() == 0)
    assert page.note.text() == "No entries match."

    # How long the daemon keeps entries: its setting, read and changed here.
    qtbot.waitUntil(lambda: page.retention.isEnabled() and page.retention.value() == 90)
    page.retention.setValue(30)
    page.retention.editingFinished.emit()
    qtbot.waitUntil(lambda: real_daemon.deps.config.audit_retention_days == 30)
    assert real_daemon.call(lambda deps: deps.config.settings()) == DaemonSettings(audit_retention_days=30)  # the
    # other settings as they were


def test_a_node_is_named_not_shown_as_its_64_hex_id(window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    box = "d" * 64
    real_daemon.call(lambda deps: deps.nodes.store.put(NodeRecord(id=box, name="gaming-pc", host="10.0.0.5",
                                                                  port=9443, certificate_pem="")))
    window.ctx.act(window.ctx.nodes.refresh())
    qtbot.waitUntil(lambda: window.ctx.nodes.name_of(box) == "gaming-pc")
    _note(real_daemon, "node.backend", box, actor="app", before="auto", after="cpu")
    window.show_page("audit")
    page = window.audit
    qtbot.waitUntil(lambda: page.table.rowCount() == 1)
    assert cells(page.table)[0][3] == "gaming-pc" and box not in " ".join(cells(page.table)[0])
    page.table.selectRow(0)
    qtbot.waitUntil(lambda: "gaming-pc" in page.heading.text())


@pytest.mark.gui
def test_the_real_daemons_log_of_who_did_what_reads_on_the_page(
        real_daemon: Any, client: DaemonClient, open_main_window: Callable[..., MainWindow], qtbot: Any) -> None:
    url, token = real_daemon
    app, ctl = DaemonClient(url, token, client_name="app"), DaemonClient(url, token, client_name="ctl")

    def run(coro: Any) -> Any:
        task = asyncio.ensure_future(coro)
        qtbot.waitUntil(task.done, timeout=10_000)
        return task.result()

    key = run(app.create_key("laptop"))
    run(ctl.revoke_key(key.info.id))
    settings = run(app.get_settings())
    run(app.put_settings(settings.model_copy(update={"audit_retention_days": 30})))
    win = open_main_window(app)
    win.show_page("audit")
    qtbot.waitUntil(lambda: {"key.create", "key.revoke", "settings.update"} <= {r[2] for r in cells(win.audit.table)})
    assert {(r[1], r[2]) for r in cells(win.audit.table)} >= {("app", "key.create"), ("ctl", "key.revoke"),
                                                               ("app", "settings.update")}
    edit = next(n for n, r in enumerate(cells(win.audit.table)) if r[2] == "settings.update")
    win.audit.table.selectRow(edit)
    qtbot.waitUntil(lambda: win.audit.diff.rowCount() > 0)
    assert ["audit_retention_days", "90", "30"] in cells(win.audit.diff)
    run(ctl.close())
