"""The registry: validation, served-name uniqueness, lifting flags, and atomic writes under SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.api.models import ModelDefinition
from daemon.models.registry import (
    Registry,
    RegistryError,
    assemble_demo_gguf,
    definition_hash,
)


def _model(model_id: str, **fields: object) -> ModelDefinition:
    return ModelDefinition.model_validate({"id": model_id, "served_name": model_id,
                                           "model_path": "/m.gguf", **fields})


async def test_add_update_remove_round_trip(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "models.json")
    assert reg.load() is False
    await reg.add(_model("a", extra_args=["-c", "1024", "--ctx-size", "2048", "--verbose"]))
    lifted = reg.require("a")
    assert lifted.settings.ctx_size == 2048 and lifted.extra_args == ["--verbose"]
    again = Registry(tmp_path / "models.json")
    assert again.load() is True and again.require("a") == lifted
    with pytest.raises(RegistryError) as clash:
        await reg.add(_model("b", served_name="A"))
    assert clash.value.code == "served_name_taken"
    await reg.remove("a")
    assert Registry(tmp_path / "models.json").load() and Registry(tmp_path / "models.json").all() == []


def test_bad_ids_are_refused() -> None:
    for bad in ("", "UPPER", "../x", "a" * 41, "-lead"):
        with pytest.raises(ValueError):
            _model(bad)


def test_hash_changes_with_settings_not_with_order_of_extra_flags() -> None:
    a = _model("a", settings={"ctx_size": 1024})
    b = _model("a", extra_args=["--ctx-size", "1024"])
    from daemon.models.registry import normalize

    assert definition_hash(normalize(a)) == definition_hash(normalize(b))
    assert definition_hash(a) != definition_hash(_model("a", settings={"ctx_size": 2048}))


def test_unreadable_file_is_kept_aside(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    path.write_text("{broken")
    reg = Registry(path)
    assert reg.load() is True and reg.all() == []
    assert (tmp_path / "models.json.invalid").read_text() == "{broken"


def test_demo_model_is_assembled_and_verified(tmp_path: Path) -> None:
    found = assemble_demo_gguf(tmp_path / "models")
    assert found is not None and found.parent == tmp_path / "models"
    assert found.suffix == ".gguf" and found.read_bytes()[:4] == b"GGUF"
    assert assemble_demo_gguf(tmp_path / "models") == found  # second time: reused after its checksum


WRITER = """
import asyncio, sys
from daemon.models.registry import Registry
from daemon.api.models import ModelDefinition
async def main():
    reg = Registry(__import__('pathlib').Path(sys.argv[1]))
    reg.load()
    i = 0
    print('writing', flush=True)
    while True:
        i += 1
        await reg.update(ModelDefinition(id='m', served_name='m', model_path='/m.gguf',
                                         description='x' * (i % 5000), tags=[str(i)]))
asyncio.run(main())
"""


def _kill_a_writer_mid_write(path: Path) -> None:
    """Start WRITER on ``path`` and SIGKILL it while it writes. Synchronous on purpose: the kill
    has to land inside a write, so nothing else gets a turn until the writer is dead."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
    before = path.stat().st_mtime_ns
    while path.stat().st_mtime_ns == before:  # it is writing now
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


async def test_killing_the_writer_never_leaves_an_unreadable_registry(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    reg = Registry(path)
    await reg.add(_model("m"))
    for _round in range(12):
        _kill_a_writer_mid_write(path)
        data = json.loads(path.read_text())  # never half a file
        assert data["models"][0]["id"] == "m"
    Registry(path).load()  # the next start sweeps temp files a killed write left behind
    assert [p.name for p in tmp_path.iterdir()] == ["models.json"]
