"""The pin rule and the agent's unpacking guards of a rolled-out llama.cpp build, without processes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from agent.api.runtime_builds import pin_matches, pin_mismatch, version_words
from agent.api.runtimes import RuntimeOffer
from agent.runtimes.rollout import BuildRefused, unpack

DIGEST = "ab12cd34" + "0" * 56


def offer(version: str | None, digest: str | None = DIGEST, available: bool = True) -> RuntimeOffer:
    return RuntimeOffer(runtime="llamacpp", available=available, version=version, digest=digest)


@pytest.mark.parametrize(("pin", "version", "matches"), [
    ("0.2.0", "0.2.0 (runtime.json)", True),          # the manifest's version, where the binary has no build number
    ("0.2.0 (runtime.json)", "0.2.0 (runtime.json)", True),
    ("0.1.0", "0.2.0 (runtime.json)", False),
    ("b4589", "b4589 (1d1e6a90)", True),              # llama.cpp's own build number
    ("1d1e6a90", "b4589 (1d1e6a90)", True),           # its commit
    ("b4588", "b4589 (1d1e6a90)", False),
    ("ab12cd34", None, True),                         # a digest prefix of 8 hex digits
    ("sha256:AB12CD34", None, True),
    ("ab12", None, False),                            # too short to name a build
    ("ab12cd35", None, False),
])
def test_a_pin_is_the_version_or_a_digest_prefix(pin: str, version: str | None, matches: bool) -> None:
    assert pin_matches(pin, offer(version)) is matches


def test_an_unavailable_runtime_matches_no_pin_and_the_refusal_names_both() -> None:
    assert not pin_matches("0.2.0", offer("0.2.0", available=False))
    why = pin_mismatch("0.2.0", offer("0.1.0 (runtime.json)"))
    assert why is not None and "llama.cpp 0.1.0 (runtime.json) (digest ab12cd340000)" in why and "pinned to 0.2.0" in why
    assert pin_mismatch("0.1.0", offer("0.1.0 (runtime.json)")) is None
    assert version_words(None) == set()


def _archive(tmp_path: Path, members: list[tarfile.TarInfo]) -> Path:
    path = tmp_path / "build.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            data = b"x" * member.size if member.isfile() else None
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.mark.parametrize(("member", "says"), [
    (_file("llamacpp-1-x/../evil"), "outside the folder"),
    (_file("/etc/evil"), "outside the folder"),
    (_file("other/bin/llama-server"), "outside the folder"),
    (_link("llamacpp-1-x/bin/libggml.so", "/etc/passwd"), "not to a file beside it"),
    (_link("llamacpp-1-x/bin/libggml.so", "../../x"), "not to a file beside it"),
])
def test_an_archive_reaching_out_of_its_folder_is_refused_and_nothing_is_unpacked(
        tmp_path: Path, member: tarfile.TarInfo, says: str) -> None:
    archive = _archive(tmp_path, [_file("llamacpp-1-x/runtime.json"), member])
    with pytest.raises(BuildRefused, match=says):
        unpack(archive, "llamacpp-1-x", tmp_path / "staging")
    assert not (tmp_path / "staging").exists()


def test_a_well_formed_archive_unpacks_with_its_links(tmp_path: Path) -> None:
    archive = _archive(tmp_path, [_file("llamacpp-1-x/runtime.json"), _file("llamacpp-1-x/bin/libggml.so.1", 3),
                                  _link("llamacpp-1-x/bin/libggml.so", "libggml.so.1")])
    folder = unpack(archive, "llamacpp-1-x", tmp_path / "staging")
    assert (folder / "bin" / "libggml.so").resolve() == (folder / "bin" / "libggml.so.1").resolve()
