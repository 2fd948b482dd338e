"""A model is saved only on a node that exists; a node may be named by its id, an id prefix or its name."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.validation import UnknownNode, resolve_node
from tests.daemon.harness import model, running_daemon

ALPHA = "3f2a9c01d4e5" + "0" * 52
BETA = "3f2b7700aa11" + "1" * 52
KNOWN = {"local": "workstation", ALPHA: "alpha", BETA: "Beta"}


def test_a_node_is_named_by_id_unique_prefix_or_name() -> None:
    assert resolve_node("local", KNOWN) == "local"
    assert resolve_node(ALPHA, KNOWN) == ALPHA
    assert resolve_node(ALPHA[:12], KNOWN) == ALPHA  # what `ctl nodes list` shows
    assert resolve_node("beta", KNOWN) == BETA and resolve_node("workstation", KNOWN) == "local"
    with pytest.raises(UnknownNode, match="ambiguous"):
        resolve_node("3f2a", {ALPHA: "alpha", "3f2a" + "f" * 60: "gamma"})
    with pytest.raises(UnknownNode, match="unknown"):
        resolve_node("3f2", KNOWN)  # too short to be a prefix
    with pytest.raises(UnknownNode) as unknown:
        resolve_node("0123456789ab", KNOWN)
    assert f"alpha (id {ALPHA})" in str(unknown.value) and "workstation (id local)" in str(unknown.value)


async def test_saving_a_model_on_an_unknown_node_is_refused_naming_the_known_ones(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        with pytest.raises(DaemonError) as refused:
            await rd.client.create_model(model("lost", str(model_file), node="0123456789ab"))
        assert (refused.value.status, refused.value.code) == (422, "unknown_node")
        assert "'0123456789ab' is unknown" in refused.value.message
        assert f"{socket.gethostname()} (id local)" in refused.value.message
        assert [m.definition.id for m in await rd.client.list_models()] == []

        saved = await rd.client.create_model(model("here", str(model_file), node=socket.gethostname()))
        assert saved.definition.node == "local"  # stored under its id: requests find the node
        with pytest.raises(DaemonError) as moved:
            await rd.client.update_model(model("here", str(model_file), node="elsewhere"))
        assert (moved.value.status, moved.value.code) == (422, "unknown_node")
        assert (await rd.client.get_model("here")).definition.node == "local"
