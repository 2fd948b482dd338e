"""``MirrorReceiver``: what the agent takes into its models folder, and when it places it."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent.api.mirror import MirrorCommit, MirrorFile
from agent.sources.mirror import MirrorReceiver, MirrorRefused

DATA = bytes(range(256)) * 64
PROJECTOR = b"projector bytes" * 100


def _file(name: str, data: bytes) -> MirrorFile:
    return MirrorFile(name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def _chunks(data: bytes, size: int = 1000) -> Callable[[], AsyncIterator[bytes]]:
    async def gen() -> AsyncIterator[bytes]:
        for n in range(0, len(data), size):
            yield data[n:n + size]
    return gen


@pytest.fixture
def receiver(tmp_path: Path) -> MirrorReceiver:
    (tmp_path / "models").mkdir()
    return MirrorReceiver(tmp_path / "models")


async def test_a_version_is_placed_only_when_every_file_is_whole_and_verified(receiver: MirrorReceiver) -> None:
    model, proj = _file("m/model.gguf", DATA), _file("m/mmproj.gguf", PROJECTOR)
    await receiver.receive(model, 0, _chunks(DATA[:5000]))  # cut: 5000 bytes there
    state = await receiver.state(model.name)
    assert (state.size, state.complete) == (5000, False)
    assert state.sha256 == hashlib.sha256(DATA[:5000]).hexdigest()
    with pytest.raises(MirrorRefused) as refused:
        await receiver.receive(model, 4000, _chunks(DATA[4000:]))
    assert refused.value.code == "mirror_offset_mismatch" and refused.value.details == {"size": 5000}
    assert (await receiver.receive(model, 5000, _chunks(DATA[5000:]))).size == len(DATA)

    with pytest.raises(MirrorRefused) as refused:  # the projector is not there yet: nothing placed
        await receiver.commit(MirrorCommit(files=[model, proj]))
    assert refused.value.code == "mirror_incomplete"
    assert not (receiver.root / "m" / "model.gguf").exists()

    await receiver.receive(proj, 0, _chunks(PROJECTOR))
    answer = await receiver.commit(MirrorCommit(files=[model, proj]))
    assert answer.paths == [str(receiver.root / "m" / "model.gguf"), str(receiver.root / "m" / "mmproj.gguf")]
    assert (receiver.root / "m" / "model.gguf").read_bytes() == DATA
    assert sorted(p.name for p in (receiver.root / "m").iterdir()) == ["mmproj.gguf", "model.gguf"]
    assert (await receiver.state(model.name)).complete
    with pytest.raises(MirrorRefused) as refused:
        await receiver.receive(model, 0, _chunks(DATA))
    assert refused.value.code == "mirror_target_exists"


async def test_other_bytes_are_refused_and_dropped(receiver: MirrorReceiver) -> None:
    model = _file("model.gguf", DATA)
    tampered = DATA[:100] + b"X" + DATA[101:]
    with pytest.raises(MirrorRefused) as refused:
        await receiver.receive(model, 0, _chunks(tampered))
    assert refused.value.code == "mirror_checksum_mismatch"
    with pytest.raises(MirrorRefused) as refused:
        await receiver.receive(model, 0, _chunks(DATA + b"more"))
    assert "more than" in refused.value.message
    assert list(receiver.root.iterdir()) == []


@pytest.mark.parametrize("name", ["../out.gguf", "/etc/x.gguf", "a//b.gguf", "a\\b.gguf", "link/x.gguf"])
async def test_names_that_leave_the_models_folder_are_refused(receiver: MirrorReceiver, tmp_path: Path,
                                                               name: str) -> None:
    (tmp_path / "outside").mkdir()
    (receiver.root / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(MirrorRefused) as refused:
        await receiver.receive(_file(name, DATA), 0, _chunks(DATA))
    assert refused.value.code == "unsafe_name"
    assert list((tmp_path / "outside").iterdir()) == []
