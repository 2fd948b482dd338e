"""``python -m installers.release_feed``: the release's one signed feed, the packs listed in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.releases.feed import ReleaseFeed
from core.releases.signing import verify_feed_signature
from installers import release_feed
from tests.updates.release import ReleaseKey


def test_the_feed_lists_each_artefact_with_its_size_and_digest_and_is_signed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    key = ReleaseKey.make(tmp_path)
    monkeypatch.setenv("MIRBADLLM_SIGNING_KEY", str(key.path))
    built = tmp_path / "built"
    built.mkdir()
    (built / "app.AppImage").write_bytes(b"image" * 100)
    (built / "llamacpp-11434.0.0-abc-cuda13.tar.gz").write_bytes(b"pack" * 1000)
    dist = tmp_path / "release"
    assert release_feed.main(["--dist", str(dist), "--version", "0.3.0",
                              f"linux-x86_64-appimage={built / 'app.AppImage'}",
                              f"llamacpp-cuda13-linux-x86_64={built / 'llamacpp-11434.0.0-abc-cuda13.tar.gz'}"]) == 0
    raw = (dist / "feed.json").read_bytes()
    assert verify_feed_signature(raw, (dist / "feed.json.sig").read_bytes(), [key.public]) is None
    feed = ReleaseFeed.model_validate(json.loads(raw))
    pack = feed.artefact_for("llamacpp-cuda13-linux-x86_64")
    assert feed.version == "0.3.0" and pack is not None and pack.size == 4000
    assert pack.url == "llamacpp-11434.0.0-abc-cuda13.tar.gz" and (dist / pack.url).is_file()
    assert "llamacpp-11434.0.0-abc-cuda13.tar.gz" in (dist / "SHA256SUMS").read_text()

    # A platform the daemon does not know, or a file that is not there: refused, nothing written.
    assert release_feed.main(["--dist", str(tmp_path / "no"), "llamacpp-rocm-linux-x86_64=" + str(built / "app.AppImage")]) == 2
    assert release_feed.main(["--dist", str(tmp_path / "no"), "linux-x86_64-deb=/nonexistent.deb"]) == 2
    assert "one of" in capsys.readouterr().err and not (tmp_path / "no").exists()
