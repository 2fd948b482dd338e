"""``ctl models rm --files`` and ``ctl models du`` against the real daemon and its local agent."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mirbadllm import ctl
from tests.daemon.harness import model, running_daemon
from tests.fakes.gguf_files import write_gguf


async def test_rm_files_asks_with_the_size_then_says_what_it_deleted_and_kept(
        tmp_path: Path, fake_runtime: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        models = rd.daemon.paths.local_agent_home / "models"
        shared = write_gguf(models / "shared.gguf", layers=4)
        projector = write_gguf(models / "beta" / "mmproj.gguf", name="projector")
        await rd.client.create_model(model("alpha", str(shared)))
        await rd.client.create_model(model("beta", str(shared), extra_args=["--mmproj", str(projector)]))
        size = projector.stat().st_size

        monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal to confirm on
        assert await ctl.run(ctl.parse_args(["models", "rm", "beta", "--files"]), rd.client) == 2
        out = capsys.readouterr()
        assert f"beta on {(await rd.client.node_files()).node_name}: 1 file(s) to delete" in out.out
        assert f"{size / 1024:.1f} KiB to free" in out.out and "--yes" in out.err
        assert projector.exists() and "beta" in [m.definition.id for m in await rd.client.list_models()]

        assert await ctl.run(ctl.parse_args(["models", "rm", "beta", "--files", "--yes"]), rd.client) == 0
        out = capsys.readouterr().out
        assert f"deleted 1 file(s), freed {size / 1024:.1f} KiB" in out
        assert f"deleted {projector}" in out and f"kept {shared}: used by alpha" in out
        assert not projector.exists() and shared.exists()


async def test_du_lists_each_file_with_its_models_and_marks_the_unused(
        tmp_path: Path, fake_runtime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        models = rd.daemon.paths.local_agent_home / "models"
        used = write_gguf(models / "used.gguf", layers=4)
        orphan = write_gguf(models / "old" / "orphan.gguf")
        await rd.client.create_model(model("alpha", str(used)))
        name = (await rd.client.node_files()).node_name

        assert await ctl.run(ctl.parse_args(["models", "du", "--node", name]), rd.client) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines[0].startswith(f"{name}: 2 file(s)") and "free of" in lines[0]
        assert any(line.startswith("   ") and f"{used}  [alpha]" in line for line in lines)
        assert any(line.startswith(" * ") and f"{orphan}  [unused]" in line for line in lines)
        assert "1 unused file(s)" in out
