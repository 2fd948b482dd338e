"""My models and disk in the app, at 1024×700, over the real daemon and its local agent's models folder
(sparse files of the sizes shown): the Nodes page's Disk card lists a node's model files with size and
used-by and the disk's free space; "Remove unused files" asks with the space it frees
and removes only those; the model panel deletes a model with its files, asked first with the size."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import cells, definition, settings_of
from PySide6.QtCore import QPoint
from real_daemon import RealDaemon, ask, daemon_on_a_machine, models_only

from app import format as fmt
from app.context import Message
from daemon.api.client import DaemonClient
from tests.fakes.gguf_files import gguf_bytes

pytestmark = pytest.mark.gui

MIB = 2**20


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    with daemon_on_a_machine(tmp_path_factory.mktemp("disk")) as found:
        yield found


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes())
    os.truncate(path, size)  # its size without the bytes: the card reads sizes, never contents
    return path


@pytest.fixture
def disk(machine: RealDaemon) -> Iterator[Path]:
    """The local agent's models folder holding alpha.gguf (alpha's model; beta's too), beta's projector and
    an orphan no model uses; the daemon holding alpha and beta (on this machine)."""
    models = machine.deps.paths.local_agent_home / "models"
    alpha = _sparse(models / "alpha.gguf", 4000 * MIB)
    projector = _sparse(models / "beta-mmproj.gguf", 600 * MIB)
    _sparse(models / "old" / "orphan.gguf", 2048 * MIB)
    models_only(machine, definition("alpha", model_path=str(alpha), node="local"),
                definition("beta", model_path=str(alpha), extra_args=["--mmproj", str(projector)], node="local"))
    yield models
    shutil.rmtree(models, ignore_errors=True)


def _model_ids(daemon: RealDaemon) -> list[str]:
    return sorted(d.id for d in daemon.call(lambda deps: deps.registry.all()))


def _fits(scroll: Any, widget: Any) -> bool:
    right = widget.mapTo(scroll.viewport(), QPoint(widget.width(), 0)).x()
    return widget.isVisible() and right <= scroll.viewport().width()


def test_the_disk_card_lists_files_and_removes_the_unused_ones(
        machine: RealDaemon, disk: Path, open_main_window: Callable[..., Any], qtbot: Any) -> None:
    win = open_main_window(DaemonClient(*machine, client_name="app"), nodes_loaded=True, size=(1024, 700))
    messages: list[Message] = []
    win.ctx.messages.subscribe(messages.append)
    asked: list[str] = []
    win.nodes.confirm = lambda _parent, text: asked.append(text) or True
    win.show_page("nodes")
    card = win.nodes.panel.disk
    qtbot.waitUntil(lambda: card.table.rowCount() == 3, timeout=30_000)

    assert cells(card.table) == [["alpha.gguf", "3.9 GiB", "alpha, beta"],
                                 ["old/orphan.gguf", "2.0 GiB", "Unused"],
                                 ["beta-mmproj.gguf", "600.0 MiB", "beta (projector)"]]
    total = fmt.size(shutil.disk_usage(disk).total)
    assert f"free of {total}" in card.summary.text() and "1 unused, 2.0 GiB" in card.summary.text()
    assert card.folder.text() == f"Models folder: {disk}"
    for widget in (card.remove_unused_button, card.refresh_button, card.table):
        assert _fits(win.nodes.panel, widget), f"{widget.objectName()} is cut off at 1024×700"

    card.remove_unused_button.click()
    qtbot.waitUntil(lambda: card.table.rowCount() == 2, timeout=30_000)
    assert asked == ["Delete 1 file(s) no model uses, freeing 2.0 GiB?\n• orphan.gguf (2.0 GiB)"]
    assert not (disk / "old" / "orphan.gguf").exists()
    assert (disk / "alpha.gguf").exists() and (disk / "beta-mmproj.gguf").exists()
    qtbot.waitUntil(lambda: bool(messages), timeout=30_000)
    assert messages[-1] == Message("Removed 1 unused file(s), freed 2.0 GiB")
    assert not card.remove_unused_button.isEnabled()


def test_deleting_a_model_with_its_files_asks_with_the_size_and_keeps_shared_ones(
        machine: RealDaemon, disk: Path, open_main_window: Callable[..., Any], qtbot: Any) -> None:
    win = open_main_window(DaemonClient(*machine, client_name="app"), size=(1024, 700))
    here = next(n.name for n in ask(machine, lambda c: c.list_nodes()) if n.id == "local")
    messages: list[Message] = []
    win.ctx.messages.subscribe(messages.append)
    editor = settings_of(win, qtbot, "beta")
    asked: list[str] = []
    editor.confirm = lambda _parent, text: asked.append(text) or False  # first: no
    assert editor.delete_files_button.isVisible() and editor.delete_files_button.isEnabled()
    for b in (editor.delete_button, editor.delete_files_button, editor.save_button):
        assert b.width() >= b.sizeHint().width(), f"{b.text()} is cut at 1024×700"

    editor.delete_files_button.click()
    qtbot.waitUntil(lambda: bool(asked), timeout=30_000)
    assert asked[0].startswith(f"Delete “beta” and 1 file(s) on {here}, freeing 600.0 MiB?\n"
                               "• beta-mmproj.gguf (600.0 MiB)")
    assert "beta" in _model_ids(machine) and (disk / "beta-mmproj.gguf").exists()  # "no": nothing deleted

    editor.confirm = lambda _parent, text: asked.append(text) or True
    editor.delete_files_button.click()
    qtbot.waitUntil(lambda: any("freed" in m.text for m in messages), timeout=30_000)
    assert _model_ids(machine) == ["alpha"]
    assert not (disk / "beta-mmproj.gguf").exists()
    assert (disk / "alpha.gguf").exists(), "alpha still uses it"
    assert [m.text for m in messages if "freed" in m.text] == [
        "Deleted beta and 1 file(s), freed 600.0 MiB; kept alpha.gguf (used by alpha)"]
