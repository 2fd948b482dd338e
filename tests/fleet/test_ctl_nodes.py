"""``mirbadllm ctl nodes``: add by address, compare, pair, list, remove, as a person types them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirbadllm import ctl, ctl_nodes
from tests.daemon.harness import running_daemon
from tests.fleet.inprocess import start_inprocess_agent


async def test_nodes_add_pair_list_and_remove(tmp_path: Path, runtime_exe: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    agent = await start_inprocess_agent(tmp_path / "agent", name="eta", llama_server=runtime_exe)
    address = f"127.0.0.1:{agent.lifecycle.port}"
    pairing = agent.last("pairing")
    try:
        async with running_daemon(tmp_path / "daemon", None, local_agent=False) as rd:
            async def ctl_run(*argv: str, answer: str = "y") -> int:
                args = ctl.parse_args(list(argv))
                if args.group == "nodes":
                    return await ctl_nodes.run(args, rd.client, ask=lambda _q: answer)
                return await ctl.run(args, rd.client)

            assert await ctl_run("nodes", "discovered") == 0
            assert "no agent waiting" in capsys.readouterr().out
            assert await ctl_run("nodes", "add", address) == 0
            out = capsys.readouterr().out
            assert "'eta' waits to be paired" in out and pairing["fingerprint"][:4].upper() in out

            assert await ctl_run("nodes", "pair", address, pairing["code"], answer="n") == 1
            assert "shows fingerprint" in capsys.readouterr().out
            assert await ctl_run("nodes", "pair", address, pairing["code"]) == 0
            assert "paired: " in capsys.readouterr().out

            assert await ctl_run("nodes", "list") == 0
            listing = capsys.readouterr().out
            node_id = agent.last("paired")["node_id"]
            assert node_id[:12] in listing and "eta" in listing and "free" in listing

            assert await ctl_run("nodes", "remove", node_id[:8]) == 0
            assert f"removed eta ({node_id[:12]})" in capsys.readouterr().out
            assert await ctl_run("nodes", "list") == 0
            assert node_id[:12] not in capsys.readouterr().out
            await agent.wait_event("unpaired")
    finally:
        await agent.close()
