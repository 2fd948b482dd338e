"""My models and disk in the app, at 1024×700: the Nodes page's Disk card lists a node's model files
with size and used-by and the disk's free space; "Remove unused files" asks with the space it frees
and removes only those; the model panel deletes a model with its files, asked first with the size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from helpers import cells, settings_of
from PySide6.QtCore import QPoint

from app.context import Message

pytestmark = pytest.mark.gui

MIB = 2**20


@pytest.fixture
def disk_fake() -> FakeDaemonClient:
    fake = FakeDaemonClient([definition("alpha"), definition("beta", model_path="/models/alpha.gguf",
                                                             extra_args=["--mmproj", "/models/beta-mmproj.gguf"])])
    fake.add_node_file("local", "/models/alpha.gguf", 4000 * MIB)
    fake.add_node_file("local", "/models/beta-mmproj.gguf", 600 * MIB)
    fake.add_node_file("local", "/models/old/orphan.gguf", 2048 * MIB)
    return fake


def _fits(scroll: Any, widget: Any) -> bool:
    right = widget.mapTo(scroll.viewport(), QPoint(widget.width(), 0)).x()
    return widget.isVisible() and right <= scroll.viewport().width()


def test_the_disk_card_lists_files_and_removes_the_unused_ones(
        disk_fake: FakeDaemonClient, open_main_window: Callable[..., Any], qtbot: Any) -> None:
    win = open_main_window(disk_fake, nodes_loaded=True, size=(1024, 700))
    messages: list[Message] = []
    win.ctx.messages.subscribe(messages.append)
    asked: list[str] = []
    win.nodes.confirm = lambda _parent, text: asked.append(text) or True
    win.show_page("nodes")
    card = win.nodes.panel.disk
    qtbot.waitUntil(lambda: card.table.rowCount() == 3)

    assert cells(card.table) == [["alpha.gguf", "3.9 GiB", "alpha, beta"],
                                 ["old/orphan.gguf", "2.0 GiB", "Unused"],
                                 ["beta-mmproj.gguf", "600.0 MiB", "beta (projector)"]]
    assert "free of 512.0 GiB" in card.summary.text() and "1 unused, 2.0 GiB" in card.summary.text()
    assert card.folder.text() == "Models folder: /models"
    for widget in (card.remove_unused_button, card.refresh_button, card.table):
        assert _fits(win.nodes.panel, widget), f"{widget.objectName()} is cut off at 1024×700"

    card.remove_unused_button.click()
    qtbot.waitUntil(lambda: card.table.rowCount() == 2)
    assert asked == ["Delete 1 file(s) no model uses, freeing 2.0 GiB?\n• orphan.gguf (2.0 GiB)"]
    assert disk_fake.called("remove_node_file") == [("local", "/models/old/orphan.gguf")]
    qtbot.waitUntil(lambda: bool(messages))
    assert messages[-1] == Message("Removed 1 unused file(s), freed 2.0 GiB")
    assert not card.remove_unused_button.isEnabled()


def test_deleting_a_model_with_its_files_asks_with_the_size_and_keeps_shared_ones(
        disk_fake: FakeDaemonClient, open_main_window: Callable[..., Any], qtbot: Any) -> None:
    win = open_main_window(disk_fake, size=(1024, 700))
    messages: list[Message] = []
    win.ctx.messages.subscribe(messages.append)
    editor = settings_of(win, qtbot, "beta")
    asked: list[str] = []
    editor.confirm = lambda _parent, text: asked.append(text) or False  # first: no
    assert editor.delete_files_button.isVisible() and editor.delete_files_button.isEnabled()
    for b in (editor.delete_button, editor.delete_files_button, editor.save_button):
        assert b.width() >= b.sizeHint().width(), f"{b.text()} is cut at 1024×700"

    editor.delete_files_button.click()
    qtbot.waitUntil(lambda: bool(asked))
    assert asked[0].startswith("Delete “beta” and 1 file(s) on workstation, freeing 600.0 MiB?\n"
                               "• beta-mmproj.gguf (600.0 MiB)")
    assert disk_fake.called("delete_model_with_files") == [] and "beta" in disk_fake.definitions

    editor.confirm = lambda _parent, text: asked.append(text) or True
    editor.delete_files_button.click()
    qtbot.waitUntil(lambda: any("freed" in m.text for m in messages))
    assert disk_fake.called("delete_model_with_files") == [("beta",)]
    assert "beta" not in disk_fake.definitions
    assert "/models/beta-mmproj.gguf" not in disk_fake.disk_files["local"]
    assert "/models/alpha.gguf" in disk_fake.disk_files["local"], "alpha still uses it"
    assert [m.text for m in messages if "freed" in m.text] == [
        "Deleted beta and 1 file(s), freed 600.0 MiB; kept alpha.gguf (used by alpha)"]
