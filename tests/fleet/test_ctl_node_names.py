"""The terminal takes a node's name or a unique id prefix wherever it takes a node id: ``ctl nodes
list`` shows 12 characters, and ``ctl models add|import --node`` with them places the model on that
node; a name that matches no node, or several, is an error listing the nodes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from daemon.api.nodes import NodeView
from mirbadllm import ctl, ctl_nodes
from tests.daemon.harness import running_daemon
from tests.fleet.inprocess import start_inprocess_agent


async def test_models_add_takes_the_id_nodes_list_shows_or_the_name(
        tmp_path: Path, runtime_exe: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = await start_inprocess_agent(tmp_path / "agent", name="eta", llama_server=runtime_exe)
    pairing = agent.last("pairing")
    try:
        async with running_daemon(tmp_path / "daemon", runtime_exe) as rd:
            found = await rd.client.add_node_address(f"127.0.0.1:{agent.lifecycle.port}")
            assert found.discovered is not None
            node = await rd.client.pair_node(found.discovered.address, pairing["code"],
                                             found.discovered.fingerprint)
            assert await ctl.run(ctl.parse_args(["nodes", "list"]), rd.client) == 0
            shown = node.id[:12]
            assert shown in capsys.readouterr().out

            assert await ctl.run(ctl.parse_args(["models", "add", "m", str(model_file), "--node", shown]),
                                 rd.client) == 0
            assert f"added m on node {shown}" in capsys.readouterr().out
            assert (await rd.client.get_model("m")).definition.node == node.id
            assert (await rd.client.start_model("m", wait=True)).state == ModelState.READY
            # Where it runs is said by name, never by the 64-hex id (ctl status, ctl models list, the app).
            assert (await rd.client.get_model("m")).status.node_name == "eta"
            assert await ctl.run(ctl.parse_args(["models", "list"]), rd.client) == 0
            listed = capsys.readouterr().out
            assert node.id not in listed and "m                        ready     eta " in listed

            assert await ctl.run(ctl.parse_args(["models", "add", "m2", str(model_file), "--node", "eta"]),
                                 rd.client) == 0
            assert (await rd.client.get_model("m2")).definition.node == node.id

            folder = model_file.parent / "more"  # a file no model runs yet (one that is would not be added again)
            folder.mkdir()
            shutil.copyfile(model_file, folder / model_file.name)
            assert await ctl.run(ctl.parse_args(["models", "import", "folder", str(folder), "--node", shown]),
                                 rd.client) == 0
            assert "added model 'fake'" in capsys.readouterr().out
            assert (await rd.client.get_model("fake")).definition.node == node.id

            with pytest.raises(DaemonError) as caught:
                await ctl.run(ctl.parse_args(["models", "add", "m3", str(model_file), "--node", "zzzzzz"]),
                              rd.client)
            assert caught.value.code == "node_not_found"
            assert f"{shown} (eta)" in caught.value.message and "local (" in caught.value.message
            assert {m.definition.id for m in await rd.client.list_models()} == {"m", "m2", "fake"}
    finally:
        await agent.close()


class FakeNodes:
    """The one ``DaemonClient`` call resolving needs."""

    def __init__(self, *nodes: NodeView) -> None:
        self.nodes = list(nodes)

    async def list_nodes(self) -> list[NodeView]:
        return self.nodes


async def test_an_ambiguous_or_too_short_prefix_lists_the_nodes() -> None:
    client = FakeNodes(NodeView(id="local", name="here", local=True), NodeView(id="abcd11" + "0" * 58, name="one"),
                       NodeView(id="abcd22" + "0" * 58, name="two"))
    assert (await ctl_nodes.resolve(client, "abcd1")).name == "one"  # type: ignore[arg-type]
    assert await ctl_nodes.resolve_id(client, "two") == "abcd22" + "0" * 58  # type: ignore[arg-type]
    with pytest.raises(DaemonError) as caught:
        await ctl_nodes.resolve(client, "abcd")  # type: ignore[arg-type]
    assert caught.value.code == "ambiguous"
    assert "abcd11000000 (one)" in caught.value.message and "abcd22000000 (two)" in caught.value.message
    with pytest.raises(DaemonError) as caught:
        await ctl_nodes.resolve(client, "ab")  # type: ignore[arg-type]
    assert caught.value.code == "node_not_found" and "local (here)" in caught.value.message
