"""The add-model wizard's "across nodes" option names the nodes as the daemon names them, never by
id: in its label (each node's layers), in why it is not needed (one node runs the model alone) and
in what room it needs. Over the real daemon and two real nodes, "tower" and "laptop" (in-process
agents, no GPU, 6 GiB of memory free of 8, the fake llama-server and ggml-rpc-server beside it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_daemon import RealDaemon, gpu_node

from app.viewmodels.add_model import AddModelViewModel
from daemon.api.client import DaemonClient
from tests.agent.test_rpc_peers import write_fake_rpc_server
from tests.fakes.gguf_files import write_gguf

BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}


class Pair:
    def __init__(self, nodes: dict[str, str], big: Path, small: Path) -> None:
        self.nodes, self.big, self.small = nodes, big, small  # nodes: name -> id


@pytest.fixture(scope="module")
def pair(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    root = tmp_path_factory.mktemp("rpc-names")
    nodes = {}
    for name in ("tower", "laptop"):
        (root / f"runtime-{name}").mkdir()
        write_fake_rpc_server(root / f"runtime-{name}")  # beside its llama-server, where the catalog looks
        nodes[name] = gpu_node(real_daemon, root, name, [], memory_gib=(8, 6))
    return Pair(nodes, write_gguf(root / "models" / "big-Q4_K_M.gguf", **BIG),
                write_gguf(root / "models" / "small-Q4_K_M.gguf"))


async def planned(client: DaemonClient, file: Path, ctx: int) -> AddModelViewModel:
    vm = AddModelViewModel(client)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("path", str(file))
    vm.set_field("ctx_size", str(ctx))
    await vm.check_plan()
    return vm


def across(vm: AddModelViewModel) -> tuple[str, str]:
    """The "across nodes" row as the wizard lists it, and the option's message."""
    s = vm.state.value
    assert s.plan is not None and len(s.plan.fleet) == 1, s.plan_error
    row = next(r for r, o in zip(s.plan_rows, s.plan_options, strict=True) if o.kind == "nodes")
    return row, s.plan.fleet[0].message


def no_ids(pair: Pair, *texts: str) -> None:
    for node_id in pair.nodes.values():
        assert all(node_id[:8] not in text for text in texts), f"a node id in {texts}"


async def test_the_split_is_labelled_with_the_nodes_names(pair: Pair, client: DaemonClient) -> None:
    vm = await planned(client, pair.big, 14336)
    row, _message = across(vm)
    option = vm.state.value.plan.fleet[0]  # type: ignore[union-attr]
    main, helper = (vm.state.value.node_name(s.node) for s in option.shares)
    assert {main, helper} == {"tower", "laptop"}
    layers = [s.layers for s in option.shares]
    assert f"across 2 nodes over llama.cpp RPC ({layers[0]} on {main} + {layers[1]} on {helper} layers)" in row
    no_ids(pair, row)
    vm.close()


async def test_not_needed_names_the_node_that_runs_it_alone(pair: Pair, client: DaemonClient) -> None:
    vm = await planned(client, pair.small, 2048)
    row, message = across(vm)
    assert message.startswith(("not needed: it runs on node tower alone", "not needed: it runs on node laptop alone"))
    assert message in row, "the wizard lists why it is not offered"
    no_ids(pair, row)
    vm.close()


async def test_room_to_make_is_said_on_named_nodes(pair: Pair, client: DaemonClient) -> None:
    vm = await planned(client, pair.big, 24576)  # 12 GiB of layers: 11 GiB free on both, 15 GiB once emptied
    row, message = across(vm)
    assert vm.state.value.plan.fleet[0].state == "needs_room", message  # type: ignore[union-attr]
    assert message.startswith("fits once room is made: ") and " more on " in message
    assert all(part.rsplit(" more on ", 1)[1] in ("tower", "laptop")
               for part in message.removeprefix("fits once room is made: ").split(", ")), message
    no_ids(pair, row, message)
    vm.close()
