"""The models folder's files on a real agent (mTLS, real client): listed with sizes and the disk's
space, removed one at a time, and every removal that would touch what is not ours refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.api.client import AgentError
from agent.api.models import InstanceState
from tests.agent._sources_support import sources_agent
from tests.agent._support import make_spec
from tests.fakes.gguf_files import gguf_bytes, write_gguf


async def _refused(call: object) -> AgentError:
    with pytest.raises(AgentError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_every_file_under_the_models_folder_is_listed_with_size_and_the_disk(
        tmp_path: Path, port_base: int) -> None:
    async with sources_agent(tmp_path, None, port_base) as agent:
        big = write_gguf(agent.models_dir / "org--repo" / "big.gguf", layers=4)
        small = agent.models_dir / "small.gguf"
        small.write_bytes(gguf_bytes())
        (agent.models_dir / "org--repo" / ".next.gguf.partial").write_bytes(b"x" * 10)  # a download under way
        os.symlink(tmp_path / "elsewhere.gguf", agent.models_dir / "link.gguf")

        listing = await agent.client.files()

        assert [f.path for f in listing.files] == [str(big), str(small)], "largest first; no partial, no link"
        assert listing.files[0].size == big.stat().st_size and listing.files[0].mtime == big.stat().st_mtime
        assert listing.models_dir == str(agent.models_dir)
        assert 0 < listing.disk_free <= listing.disk_total


async def test_a_file_is_removed_with_the_folders_it_leaves_empty(tmp_path: Path, port_base: int) -> None:
    async with sources_agent(tmp_path, None, port_base) as agent:
        model = write_gguf(agent.models_dir / "org--repo" / "q4" / "m.gguf")
        size = model.stat().st_size

        removed = await agent.client.remove_file(str(model))

        assert (removed.path, removed.size, removed.freed) == (str(model), size, size)
        assert not model.exists() and not (agent.models_dir / "org--repo").exists()
        assert agent.models_dir.is_dir(), "the models folder itself stays"
        assert (await agent.client.files()).files == []


async def test_a_hard_linked_file_frees_nothing_while_its_other_link_lives(tmp_path: Path, port_base: int) -> None:
    ollama_blob = write_gguf(tmp_path / "ollama" / "blobs" / "sha256-0")
    async with sources_agent(tmp_path, None, port_base) as agent:
        linked = agent.models_dir / "llama3.gguf"
        os.link(ollama_blob, linked)
        assert (await agent.client.files()).files[0].links == 2
        removed = await agent.client.remove_file(str(linked))
        assert removed.freed == 0 and ollama_blob.exists()


async def test_removals_outside_the_models_folder_are_refused(tmp_path: Path, port_base: int) -> None:
    mine = write_gguf(tmp_path / "lmstudio" / "models" / "mine.gguf")  # imported in place: the user's
    async with sources_agent(tmp_path, None, port_base) as agent:
        outside = await _refused(agent.client.remove_file(str(mine)))
        assert (outside.status, outside.code) == (403, "outside_models_folder")

        dotted = await _refused(agent.client.remove_file(f"{agent.models_dir}/../../lmstudio/models/mine.gguf"))
        assert dotted.status == 400 and dotted.code == "unsafe_path"

        os.symlink(mine, agent.models_dir / "mine.gguf")
        link_out = await _refused(agent.client.remove_file(str(agent.models_dir / "mine.gguf")))
        assert (link_out.status, link_out.code) == (403, "outside_models_folder")

        os.symlink(mine.parent, agent.models_dir / "lms")  # a folder link leading out
        through = await _refused(agent.client.remove_file(str(agent.models_dir / "lms" / "mine.gguf")))
        assert (through.status, through.code) == (403, "outside_models_folder")

        root = await _refused(agent.client.remove_file(str(agent.models_dir)))
        assert root.code == "outside_models_folder"
        assert mine.exists(), "nothing outside the models folder was touched"


async def test_a_folder_a_missing_file_and_a_partial_are_refused(tmp_path: Path, port_base: int) -> None:
    async with sources_agent(tmp_path, None, port_base) as agent:
        folder = agent.models_dir / "org--repo"
        write_gguf(folder / "m.gguf")
        (folder / ".n.gguf.partial").write_bytes(b"x")

        not_file = await _refused(agent.client.remove_file(str(folder)))
        assert (not_file.status, not_file.code) == (422, "not_a_file") and "folder" in not_file.message
        missing = await _refused(agent.client.remove_file(str(folder / "gone.gguf")))
        assert (missing.status, missing.code) == (404, "file_not_found")
        partial = await _refused(agent.client.remove_file(str(folder / ".n.gguf.partial")))
        assert (partial.status, partial.code) == (409, "file_in_transfer")
        assert (folder / "m.gguf").exists() and (folder / ".n.gguf.partial").exists()


async def test_a_file_a_running_instance_reads_is_refused_until_it_stops(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    async with sources_agent(tmp_path, fake_runtime(), port_base) as agent:
        model = write_gguf(agent.models_dir / "vision" / "m.gguf")
        projector = agent.models_dir / "vision" / "mmproj.gguf"
        projector.write_bytes(gguf_bytes(name="projector"))
        await agent.client.start(make_spec(model, "vis", extra_args=["--mmproj", str(projector)]))
        await agent.state("vis", InstanceState.READY)

        for path in (model, projector):
            busy = await _refused(agent.client.remove_file(str(path)))
            assert (busy.status, busy.code) == (409, "file_in_use") and busy.details["instances"] == ["vis"]
            assert "vis" in busy.message and path.exists()

        size = projector.stat().st_size
        await agent.client.stop("vis", timeout=5)
        assert (await agent.client.remove_file(str(projector))).freed == size
        assert not projector.exists() and model.exists()
