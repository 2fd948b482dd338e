"""My models and disk, on the real daemon and its local agent: each file of the models folder with
the models that use it, a model removed with its files (a file another model uses kept, a file of
its own deleted, a file outside the models folder never touched), and an unused file removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.files import files_to_free, unused_files
from tests.daemon.harness import model, running_daemon
from tests.fakes.gguf_files import gguf_bytes


def _write(path: Path, **shape: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(**shape))  # type: ignore[arg-type]
    return path


async def test_rm_with_files_keeps_a_shared_file_and_deletes_its_own(tmp_path: Path, fake_runtime: Path) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        models = rd.daemon.paths.local_agent_home / "models"
        shared = _write(models / "org--repo" / "shared.gguf", layers=4)
        projector = _write(models / "org--repo" / "mmproj.gguf", name="projector")
        mine = _write(tmp_path / "lmstudio" / "mine.gguf")  # registered where it lies: the user's
        await rd.client.create_model(model("alpha", str(shared)))
        await rd.client.create_model(model("beta", str(shared), extra_args=["--mmproj", str(projector)]))
        await rd.client.create_model(model("gamma", str(mine)))

        before = await rd.client.node_files("local")
        assert [(f.path, f.size) for f in files_to_free(before, "beta")] == [(str(projector), projector.stat().st_size)]

        removal = await rd.client.delete_model_with_files("beta")

        assert [d.path for d in removal.deleted] == [str(projector)] and not projector.exists()
        assert removal.freed == removal.deleted[0].size > 0
        assert [(k.path, k.reason, k.used_by) for k in removal.kept] == [(str(shared), "used", ["alpha"])]
        assert shared.exists() and "beta" not in [m.definition.id for m in await rd.client.list_models()]

        outside = await rd.client.delete_model_with_files("gamma")
        assert outside.deleted == [] and [k.reason for k in outside.kept] == ["outside_models_folder"]
        assert mine.exists()

        last = await rd.client.delete_model_with_files("alpha")
        assert [d.path for d in last.deleted] == [str(shared)] and not shared.exists()
        assert not (models / "org--repo").exists(), "the emptied folder went with it"


async def test_du_lists_each_file_with_its_models_and_an_unused_file_can_be_removed(
        tmp_path: Path, fake_runtime: Path) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        models = rd.daemon.paths.local_agent_home / "models"
        used = _write(models / "used.gguf", layers=4)
        orphan = _write(models / "old" / "orphan.gguf")
        await rd.client.create_model(model("alpha", str(used)))

        view = await rd.client.node_files("local")

        assert view.node == "local" and view.node_name and view.models_dir == str(models)
        assert 0 < view.disk_free <= view.disk_total
        by_path = {f.path: f for f in view.files}
        assert [(u.model, u.role) for u in by_path[str(used)].used_by] == [("alpha", "model")]
        assert not by_path[str(used)].unused and by_path[str(orphan)].unused
        assert [f.path for f in unused_files(view)] == [str(orphan)]
        assert view.unused_bytes == orphan.stat().st_size

        with pytest.raises(DaemonError) as refused:
            await rd.client.remove_node_file("local", str(used))
        assert (refused.value.status, refused.value.code) == (409, "file_in_use") and "alpha" in refused.value.message
        assert used.exists()

        removed = await rd.client.remove_node_file("local", str(orphan))
        assert removed.freed == removed.size > 0 and not orphan.exists()
        assert [f.path for f in (await rd.client.node_files("local")).files] == [str(used)]

        with pytest.raises(DaemonError) as outside:
            await rd.client.remove_node_file("local", str(tmp_path / "elsewhere.gguf"))
        assert (outside.value.status, outside.value.code) == (403, "outside_models_folder")
