"""The model editor's Node picker on a daemon without a local agent: it offers the nodes the daemon
has (a new model lands on one of them, not on a "local" the daemon would refuse), says so when it
has none, and shows a saved model's missing "local" as missing rather than as another node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import definition, settings_of
from real_daemon import WORKSTATION, RealDaemon, daemon_in_thread

from app.ui.main_window import MainWindow
from app.viewmodels.nodes import LOCAL, NO_NODES
from daemon.api.client import DaemonClient

pytestmark = pytest.mark.gui


def _saved(daemon: RealDaemon, model_id: str) -> Any:
    return next((d for d in daemon.call(lambda deps: deps.registry.all()) if d.id == model_id), None)


def _choices(picker: Any) -> list[Any]:
    return [picker.itemData(i) for i in range(picker.count())]


def test_a_new_model_is_placed_on_a_node_the_daemon_has(real_daemon: RealDaemon,
                                                        open_main_window: Callable[..., MainWindow],
                                                        qtbot: Any) -> None:
    real_daemon.hold_models(definition("alpha"))  # on "workstation", this daemon's one node
    window = open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)
    window.show_page("models")
    window.models.add_button.click()
    editor = window.models.panel.settings
    picker = editor.editors["node"]
    assert _choices(picker) == [WORKSTATION], "no 'This machine': this daemon runs no local agent"
    assert picker.currentData() == WORKSTATION and picker.currentText().startswith("workstation")
    editor.editors["id"].setText("gamma")
    assert editor.save_button.isEnabled()
    editor.save_button.click()
    qtbot.waitUntil(lambda: _saved(real_daemon, "gamma") is not None)
    assert _saved(real_daemon, "gamma").node == WORKSTATION
    assert "unknown" not in window.statusBar().currentMessage()


def test_a_saved_models_missing_local_node_is_shown_as_missing(real_daemon: RealDaemon,
                                                               open_main_window: Callable[..., MainWindow],
                                                               qtbot: Any) -> None:
    old, = real_daemon.hold_models(definition("old"))

    def left_on_local(deps: Any) -> None:  # as saved while the daemon ran its local agent (models.json)
        deps.registry._models["old"] = old.model_copy(update={"node": LOCAL})

    real_daemon.call(left_on_local)
    window = open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)
    editor = settings_of(window, qtbot, "old")
    picker = editor.editors["node"]
    assert _choices(picker) == [WORKSTATION]
    assert picker.currentIndex() == -1 and picker.placeholderText() == "local: no such node here — pick one"
    assert not editor.save_button.isEnabled(), "nothing changed: the model is not moved behind the user's back"
    picker.setCurrentIndex(0)
    editor.save_button.click()
    qtbot.waitUntil(lambda: _saved(real_daemon, "old").node == WORKSTATION)


def test_a_daemon_without_nodes_says_so(tmp_path: Path, open_main_window: Callable[..., MainWindow],
                                        qtbot: Any) -> None:
    with daemon_in_thread(tmp_path / "bare") as bare:
        window = open_main_window(DaemonClient(*bare, client_name="app"), nodes_loaded=True)
        window.show_page("models")
        window.models.add_button.click()
        picker = window.models.panel.settings.editors["node"]
        assert picker.count() == 0 and picker.currentIndex() == -1
        assert picker.placeholderText() == NO_NODES
