"""The Nodes page rotates the daemon's CA: it asks first, shows the result (the offline nodes to pair
again), and shows the daemon's refusal while a node is being paired, with nothing changed. The real
daemon with a real paired agent ("alpha", switched) and a paired node it cannot reach ("gpu-box")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from app.context import Message
from app.ui.main_window import MainWindow
from app.viewmodels.ca_rotation import rotation_summary
from daemon.api.ca_rotation import CaRotationResult, NodeRotation
from daemon.api.client import DaemonClient
from daemon.deps import DaemonDeps
from daemon.nodes.store import NodeRecord

BOX = "d" * 64


def test_the_summary_names_what_switched_failed_and_is_offline() -> None:
    done = CaRotationResult(old_ca="a" * 64, new_ca="b" * 64, retired=True, seconds=0.12, offline=["beta"],
                            nodes=[NodeRotation(node="x", name="alpha", outcome="rotated"),
                                   NodeRotation(node="y", name="beta", outcome="offline")])
    assert rotation_summary(done) == "CA rotated: 1 node switched (0.12 s).\nOffline, pair again: beta"
    stuck = CaRotationResult(old_ca="a" * 64, new_ca="b" * 64, retired=False, problem="beta did not switch",
                             nodes=[NodeRotation(node="y", name="beta", outcome="failed", message="no answer")])
    assert rotation_summary(stuck) == "CA not rotated: beta did not switch\nFailed: beta (no answer)"


@pytest.fixture(scope="module")
def fleet(real_daemon: Any) -> Any:
    """The real daemon with "alpha" (a real agent, online) and "gpu-box" (paired, never reachable)."""
    real_daemon.add_node("alpha")

    async def unreachable(deps: DaemonDeps) -> None:
        await deps.nodes.store.put(NodeRecord(id=BOX, name="gpu-box", host="127.0.0.1", port=9, certificate_pem=""))

    real_daemon.call(unreachable)
    return real_daemon


@pytest.fixture
def window(fleet: Any, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*fleet, client_name="app"), nodes_loaded=True, size=(1280, 800))


def _ca(fleet: Any) -> bytes:
    return (fleet.deps.paths.pki / "ca.crt").read_bytes()  # type: ignore[no-any-return]


@pytest.mark.gui
def test_rotate_ca_asks_then_shows_the_result(window: MainWindow, fleet: Any, qtbot: Any) -> None:
    window.show_page("nodes")
    page = window.nodes
    before = _ca(fleet)
    page.confirm = lambda _parent, _text: False
    page.rotate_button.click()
    assert _ca(fleet) == before and not page.rotation_note.isVisible()  # declined: nothing asked of the daemon

    page.confirm = lambda _parent, text: "paired again" in text
    page.rotate_button.click()
    qtbot.waitUntil(lambda: page.rotation_note.isVisible(), timeout=30_000)
    assert page.rotation_note.text().startswith("CA rotated: 1 node switched")
    assert "Offline, pair again: gpu-box" in page.rotation_note.text()
    assert page.rotate_button.isEnabled()
    assert _ca(fleet) != before  # the daemon's CA is a new one


@pytest.mark.gui
def test_a_refused_rotation_says_why(window: MainWindow, fleet: Any, qtbot: Any) -> None:
    messages: list[Message] = []
    window.ctx.messages.subscribe(messages.append)
    window.show_page("nodes")
    page = window.nodes
    page.confirm = lambda _parent, _text: True
    before = _ca(fleet)
    held: list[asyncio.StreamWriter] = []

    async def pairing_under_way(deps: DaemonDeps) -> tuple[Any, DaemonClient, Any]:
        async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # accepts, never answers: the pairing waits on it

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        client = DaemonClient(*fleet)
        port = server.sockets[0].getsockname()[1]
        return server, client, asyncio.ensure_future(client.pair_node(f"127.0.0.1:{port}", "ABCD-EFGH", "ab" * 32))

    server, client, pairing = fleet.call(pairing_under_way)
    try:
        qtbot.waitUntil(lambda: fleet.deps.nodes.pairing_busy)
        page.rotate_button.click()
        qtbot.waitUntil(lambda: any(m.error for m in messages))
        assert "being paired" in messages[-1].text and not page.rotation_note.isVisible()
        qtbot.waitUntil(lambda: page.rotate_button.isEnabled())
        assert _ca(fleet) == before  # nothing changed
    finally:
        async def end(_deps: DaemonDeps) -> None:
            pairing.cancel()
            await asyncio.gather(pairing, return_exceptions=True)
            for writer in held:
                writer.close()
            server.close()
            await client.close()

        fleet.call(end)
