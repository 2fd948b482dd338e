"""The Nodes page rotates the daemon's CA: it asks first, shows the result (the offline nodes to pair
again), and shows the daemon's refusal while a node is being paired, with nothing changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient

from app.context import Message
from app.ui.main_window import MainWindow
from app.viewmodels.ca_rotation import rotation_summary
from daemon.api.ca_rotation import CaRotationResult, NodeRotation
from daemon.api.client import DaemonError
from daemon.api.nodes import NodeState, NodeView

BOX = "d" * 64


def test_the_summary_names_what_switched_failed_and_is_offline() -> None:
    done = CaRotationResult(old_ca="a" * 64, new_ca="b" * 64, retired=True, seconds=0.12, offline=["beta"],
                            nodes=[NodeRotation(node="x", name="alpha", outcome="rotated"),
                                   NodeRotation(node="y", name="beta", outcome="offline")])
    assert rotation_summary(done) == "CA rotated: 1 node switched (0.12 s).\nOffline, pair again: beta"
    stuck = CaRotationResult(old_ca="a" * 64, new_ca="b" * 64, retired=False, problem="beta did not switch",
                             nodes=[NodeRotation(node="y", name="beta", outcome="failed", message="no answer")])
    assert rotation_summary(stuck) == "CA not rotated: beta did not switch\nFailed: beta (no answer)"


@pytest.fixture
def window(fake: FakeDaemonClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    fake.nodes.append(NodeView(id=BOX, name="gpu-box", state=NodeState.OFFLINE, address="10.0.0.9:9443"))
    return open_main_window(fake, nodes_loaded=True, size=(1280, 800))


@pytest.mark.gui
def test_rotate_ca_asks_then_shows_the_result(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    window.show_page("nodes")
    page = window.nodes
    page.confirm = lambda _parent, _text: False
    page.rotate_button.click()
    assert fake.called("rotate_ca") == []  # declined: nothing asked of the daemon

    page.confirm = lambda _parent, text: "paired again" in text
    page.rotate_button.click()
    qtbot.waitUntil(lambda: page.rotation_note.isVisible())
    assert page.rotation_note.text().startswith("CA rotated: 1 node switched")
    assert "Offline, pair again: gpu-box" in page.rotation_note.text()
    assert page.rotate_button.isEnabled()


@pytest.mark.gui
def test_a_refused_rotation_says_why(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    messages: list[Message] = []
    window.ctx.messages.subscribe(messages.append)
    window.show_page("nodes")
    page = window.nodes
    page.confirm = lambda _parent, _text: True
    fake.ca_rotation_refusal = DaemonError(409, "pairing_in_progress", "A node is being paired; rotate the CA once "
                                           "the pairing has finished.")
    page.rotate_button.click()
    qtbot.waitUntil(lambda: any(m.error for m in messages))
    assert "being paired" in messages[-1].text and not page.rotation_note.isVisible()
    qtbot.waitUntil(lambda: page.rotate_button.isEnabled())
