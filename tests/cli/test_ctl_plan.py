"""``mirbadllm ctl models plan``: a file or a repo read as the right source, the plan as a table (from
a hand-made plan with two GPUs, a node that gave none, and the across-nodes option), and the
command against the real daemon and its local agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.api.plan import DeviceUse, NodePlan, NodeShare, PlanOption
from agent.api.sources import GgufSummary, HfFileRef
from daemon.api.client import DaemonError
from daemon.api.plan import NodePlanError, Plan
from daemon.sources.plan import across_nodes
from mirbadllm import ctl
from mirbadllm.ctl_plan import source_of, table
from tests.daemon.harness import running_daemon

GIB = 1 << 30
SUMMARY = GgufSummary(architecture="llama", name="Tiny", file_size=2 * GIB, tensor_bytes=2 * GIB, tensor_count=9,
                      block_count=28, context_length=32768)


def test_a_path_is_a_file_and_owner_repo_is_hugging_face(tmp_path: Path) -> None:
    here = tmp_path / "m.gguf"
    here.write_bytes(b"GGUF")
    assert source_of(str(here)) == (str(here.resolve()), None)
    assert source_of("/on/the/node.gguf") == ("/on/the/node.gguf", None)  # not here: the node's path as typed
    assert source_of("ggml-org/gemma-3-270m-GGUF:Q4_K_M") == (
        None, HfFileRef(repo="ggml-org/gemma-3-270m-GGUF", quant="Q4_K_M"))
    assert source_of("acme/tiny-GGUF/sub/tiny-Q8_0.gguf", "v2") == (
        None, HfFileRef(repo="acme/tiny-GGUF", file="sub/tiny-Q8_0.gguf", revision="v2"))
    assert source_of("acme/tiny-GGUF")[1] == HfFileRef(repo="acme/tiny-GGUF", file="*.gguf")
    with pytest.raises(DaemonError, match="neither a file nor"):
        source_of("just-a-name")


def _option(**fields: object) -> PlanOption:
    base: dict[str, object] = {"kind": "gpu", "label": "GPU 0 (Big)", "node": "n1", "gpus": [0], "state": "free",
                               "ctx_size": 32768, "max_ctx_size": 32768, "max_ctx_size_empty": 32768,
                               "args": ["--device", "CUDA0", "--n-gpu-layers", "29", "--ctx-size", "32768"],
                               "devices": [DeviceUse(device="cpu", needed_bytes=GIB // 2, free_bytes=30 * GIB,
                                                     capacity_bytes=60 * GIB),
                                           DeviceUse(device="CUDA0", needed_bytes=5 * GIB, free_bytes=20 * GIB,
                                                     capacity_bytes=23 * GIB)]}
    return PlanOption.model_validate({**base, **fields})


def test_the_table_has_a_row_per_option_its_flags_and_why_it_waits() -> None:
    busy = _option(label="GPU 1 (Small)", gpus=[1], state="needs_room", max_ctx_size=0,
                   args=["--device", "CUDA1"], message="fits once room is made: 1.5 GiB more on CUDA1")
    nodes = [NodePlan(node="n1", source="/m/tiny.gguf", summary=SUMMARY, options=[_option(), busy]),
             NodePlan(node="n2", source="/m/tiny.gguf", summary=SUMMARY,
                      options=[_option(node="n2", kind="cpu", label="CPU only", gpus=[], args=[])])]
    plan = Plan(source="/m/tiny.gguf", summary=SUMMARY, nodes=nodes, fleet=across_nodes(nodes),
                errors=[NodePlanError(node="n3", code="invalid_model_file", message="cannot read tiny.gguf")])
    lines = table(plan, {"n1": "tower"})
    assert lines[0] == "Tiny: llama, 28 layers, 2.0 GiB, native context 32768 (/m/tiny.gguf)"
    assert lines[1].split() == ["NODE", "OPTION", "STATE", "CTX", "MAX", "NOW", "MAX", "EMPTY", "HOLDS",
                                "(needed", "/", "free,", "GiB)"]
    assert lines[2].startswith("tower") and "GPU 0 (Big)" in lines[2] and "free now" in lines[2]
    assert lines[2].endswith("cpu 0.5/30.0  CUDA0 5.0/20.0")
    assert lines[3].strip() == "--device CUDA0 --n-gpu-layers 29 --ctx-size 32768"
    assert "needs room" in lines[4] and lines[6].strip() == "fits once room is made: 1.5 GiB more on CUDA1"
    assert lines[7].startswith("n2") and "CPU only" in lines[7]
    assert lines[8].startswith("fleet") and "not available yet" in lines[8] and "RPC" in lines[8]
    assert lines[9].strip() == "not needed: it runs on node n1 alone (GPU 0 (Big)), faster than over the network"
    assert lines[-1] == "n3: no plan (invalid_model_file): cannot read tiny.gguf"
    nothing = Plan(nodes=[NodePlan(node="n1", summary=SUMMARY, options=[_option(state="too_big")])])
    assert table(nothing)[-1] == "nothing fits on any node, even with room made"


def test_a_split_across_nodes_shows_each_nodes_part_and_how_to_add_it() -> None:
    shares = [NodeShare(node="n1", role="main", layers=20, device="cpu", needed_bytes=6 * GIB, free_bytes=7 * GIB,
                        capacity_bytes=8 * GIB),
              NodeShare(node="n2" * 32, role="helper", layers=8, device="gpus", needed_bytes=3 * GIB,
                        free_bytes=4 * GIB, capacity_bytes=8 * GIB)]
    split = _option(kind="nodes", label="across 2 nodes", gpus=[], ctx_size=8192, max_ctx_size=8192,
                    max_ctx_size_empty=16384, devices=[], shares=shares, rpc_nodes=["n2" * 32],
                    args=["--ctx-size", "8192", "--n-gpu-layers", "8"])
    plan = Plan(source="/m/big.gguf", summary=SUMMARY,
                nodes=[NodePlan(node="n1", summary=SUMMARY, options=[_option(state="too_big")])], fleet=[split])
    lines = table(plan, {"n1": "tower", "n2" * 32: "laptop"})
    row = lines[-3].split()
    assert row == ["tower", "across", "2", "nodes", "(llama.cpp", "RPC)", "free", "now", "8192", "8192", "16384",
                   "tower", "6.0/7.0", "laptop", "3.0/4.0"]
    assert lines[-2].strip() == ("layers: 20 on tower (main, cpu), 8 on laptop (helper, gpus); "
                                 "add it with `ctl models add ... --node tower --rpc-node laptop --memory-budget 6`")
    assert lines[-1].strip() == "--ctx-size 8192 --n-gpu-layers 8"


async def test_ctl_models_plan_against_the_daemon(tmp_path: Path, fake_runtime: Path, model_file: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await ctl.run(ctl.parse_args(["models", "plan", str(model_file), "--ctx", "1024"]), rd.client) == 0
        out = capsys.readouterr().out.splitlines()
        local = next(n for n in await rd.client.list_nodes() if n.id == "local")
        assert out[1].startswith("NODE") and out[2].startswith(local.name or "local") and "free now" in out[2]
        assert any("--ctx-size 1024" in line for line in out)
        assert await ctl.run(ctl.parse_args(["models", "plan", str(model_file), "--node", "local"]), rd.client) == 0
        with pytest.raises(DaemonError) as caught:
            await ctl.run(ctl.parse_args(["models", "plan", str(tmp_path / "none.gguf")]), rd.client)
        assert caught.value.code == "invalid_model_file"


async def test_ctl_models_add_takes_helper_nodes_and_a_memory_budget(tmp_path: Path, fake_runtime: Path,
                                                                      model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        argv = ["models", "add", "split", str(model_file), "--rpc-node", "elsewhere", "--memory-budget", "2.5"]
        with pytest.raises(DaemonError) as caught:  # the daemon's own check, said as it says it
            await ctl.run(ctl.parse_args(argv), rd.client)
        assert caught.value.status == 422 and "rpc_nodes" in caught.value.message
        assert await ctl.run(ctl.parse_args(["models", "add", "budgeted", str(model_file), "--memory-budget", "2.5"]),
                             rd.client) == 0
        saved = (await rd.client.get_model("budgeted")).definition
        assert (saved.memory_budget_gib, saved.rpc_nodes) == (2.5, [])
