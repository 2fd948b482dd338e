"""``core.json_store``: the one helper behind models.json, nodes.json, keys.json and
processes.json: atomic 0600 writes, pydantic validation on load, unreadable files named."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from core.json_store import JsonStore, UnreadableStore


class _Shape(BaseModel):
    version: int = 1
    names: list[str] = []


def test_a_written_file_reads_back_and_is_private(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "sub" / "things.json", _Shape)
    assert store.read() is None  # no file yet: first run
    store.write(_Shape(names=["a", "b"]))
    assert store.read() == _Shape(names=["a", "b"])
    if sys.platform != "win32":
        assert store.path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in store.path.parent.iterdir()] == ["things.json"]  # no temp file left


def test_a_file_of_the_wrong_shape_is_unreadable_and_can_be_set_aside(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "things.json", _Shape)
    store.path.write_text('{"names": 3}')
    with pytest.raises(UnreadableStore) as caught:
        store.read()
    assert isinstance(caught.value.cause, ValidationError) and caught.value.path == store.path
    assert store.set_aside() == tmp_path / "things.json.invalid"
    assert store.read() is None and (tmp_path / "things.json.invalid").read_text() == '{"names": 3}'


def test_broken_json_is_unreadable(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "things.json", _Shape)
    store.path.write_text("{broken")
    with pytest.raises(UnreadableStore, match="Expecting property name"):
        store.read()


def test_a_write_cut_short_leaves_the_old_file_and_its_temp_is_swept(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "things.json", _Shape)
    store.write(_Shape(names=["old"]))
    stale = tmp_path / ".things.json.abc123.tmp"  # what a process killed before os.replace leaves
    stale.write_text('{"names": ["half')
    assert store.read() == _Shape(names=["old"])
    store.sweep_temps()
    assert not stale.exists() and store.path.exists()


def test_the_mode_is_the_stores(tmp_path: Path) -> None:
    if sys.platform == "win32":
        pytest.skip("Windows files inherit their folder's ACL")
    store = JsonStore(tmp_path / "public.json", _Shape, mode=0o644)
    store.write(_Shape())
    assert os.stat(store.path).st_mode & 0o777 == 0o644
