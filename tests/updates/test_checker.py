"""The update checker against a feed served on loopback: what is offered, staged, and refused."""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path

import pytest

from app.updates import (
    AppImageInstaller,
    UpdateChecker,
    UpdateError,
    UpdateReady,
    UpToDate,
)
from core.releases.feed import feed_bytes
from tests.updates.release import (
    APPIMAGE,
    PAYLOAD,
    FakeInstaller,
    ReleaseKey,
    ReleaseServer,
    feed_for,
)

_LOGGER = logging.getLogger(__name__)


def checker(server: ReleaseServer, key: ReleaseKey, staging: Path, current: str = "0.1.0",
            installer: FakeInstaller | None = None, **kwargs: object) -> UpdateChecker:
    return UpdateChecker(server.feed_url, current_version=current, installer=installer or FakeInstaller(),
                         staging_dir=staging, trusted_keys=[key.public], **kwargs)  # type: ignore[arg-type]


async def refusal(check: UpdateChecker) -> UpdateError:
    with pytest.raises(UpdateError) as caught:
        await check.check()
    return caught.value


async def test_a_newer_signed_release_is_downloaded_verified_and_staged(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0"), key)
    result = await checker(release_server, key, tmp_path / "staging").check()
    assert isinstance(result, UpdateReady)
    assert result.message == "MirbadLLM 0.2.0 is ready — Restart to update"
    assert result.staged.path == tmp_path / "staging" / APPIMAGE
    assert result.staged.path.read_bytes() == PAYLOAD
    assert [p.name for p in (tmp_path / "staging").iterdir()] == [APPIMAGE]  # no partial left behind


async def test_a_second_check_reuses_the_verified_staged_file(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0"), key)
    await checker(release_server, key, tmp_path / "staging").check()
    result = await checker(release_server, key, tmp_path / "staging").check()
    assert isinstance(result, UpdateReady) and result.staged.path.read_bytes() == PAYLOAD
    assert release_server.hits[APPIMAGE] == 1


async def test_the_same_version_is_the_latest(release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.1.0"), key)
    result = await checker(release_server, key, tmp_path / "staging").check()
    assert isinstance(result, UpToDate) and result.message == "You have the latest version"
    assert release_server.hits[APPIMAGE] == 0


async def test_a_feed_signed_by_another_key_is_refused_before_it_is_read(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    impostor = ReleaseKey.make(tmp_path, "impostor.key")
    release_server.publish(feed_for("0.2.0"), impostor)
    error = await refusal(checker(release_server, key, tmp_path / "staging"))
    assert error.check == "signature"
    assert error.message == ("Signature check failed: the feed is not signed by a trusted MirbadLLM release key; "
                             "the update was not used")
    assert release_server.hits[APPIMAGE] == 0


async def test_a_feed_changed_after_signing_is_refused(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0"), key)
    release_server.files["feed.json"] = feed_bytes(feed_for("9.0.0"))  # the old signature stays
    error = await refusal(checker(release_server, key, tmp_path / "staging"))
    assert error.check == "signature" and "not signed by a trusted MirbadLLM release key" in error.message


async def test_garbage_behind_a_bad_signature_is_never_parsed(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.files.update({"feed.json": b"{not json", "feed.json.sig": base64.b64encode(bytes(64))})
    error = await refusal(checker(release_server, key, tmp_path / "staging"))
    assert error.check == "signature"  # not a JSON error: the signature comes first


async def test_a_feed_without_a_signature_is_refused(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0"), key)
    del release_server.files["feed.json.sig"]
    error = await refusal(checker(release_server, key, tmp_path / "staging"))
    assert error.check == "signature"
    assert error.message.startswith("Signature check failed: no signature at http://127.0.0.1:")
    assert "/releases/feed.json.sig (HTTP 404)" in error.message


async def test_a_raw_signature_file_is_accepted_too(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0"), key)
    release_server.files["feed.json.sig"] = base64.b64decode(release_server.files["feed.json.sig"])
    assert isinstance(await checker(release_server, key, tmp_path / "staging").check(), UpdateReady)


async def test_a_build_that_trusts_no_key_refuses_every_feed(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0"), key)
    check = UpdateChecker(release_server.feed_url, current_version="0.1.0", installer=FakeInstaller(),
                          staging_dir=tmp_path / "staging", trusted_keys=())
    error = await refusal(check)
    assert error.message == ("Signature check failed: this build trusts no release key, so no feed can be "
                             "verified; the update was not used")


async def test_a_downgrade_or_replayed_old_feed_is_refused(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.1.0"), key)  # a genuine, signed, older release
    error = await refusal(checker(release_server, key, tmp_path / "staging", current="0.2.0"))
    assert error.check == "version"
    assert error.message == ("Version check failed: the feed offers 0.1.0, older than the running 0.2.0 "
                             "(a downgrade or a replayed old feed); nothing was downloaded")
    assert release_server.hits[APPIMAGE] == 0
    assert not (tmp_path / "staging").exists() or list((tmp_path / "staging").iterdir()) == []


async def test_versions_compare_as_versions_not_text(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.10.0"), key)
    result = await checker(release_server, key, tmp_path / "staging", current="0.9.0").check()
    assert isinstance(result, UpdateReady) and result.version == "0.10.0"


@pytest.mark.parametrize(("tamper", "check", "message"), [
    (lambda p: p[:-1] + bytes([p[-1] ^ 1]), "checksum", "Checksum check failed: the SHA-256 of " + APPIMAGE + " is "),
    (lambda p: p[:-10], "size", (f"Size check failed: {APPIMAGE} is {len(PAYLOAD) - 10} bytes, the feed lists "
                                 f"{len(PAYLOAD)}")),
    (lambda p: p + b"more", "size", (f"Size check failed: {APPIMAGE} is larger than the {len(PAYLOAD)} bytes the "
                                     "feed lists")),
], ids=["wrong-checksum", "too-short", "too-long"])
async def test_an_artefact_that_does_not_match_the_feed_is_refused_and_nothing_is_staged(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path, tamper, check: str, message: str) -> None:
    release_server.publish(feed_for("0.2.0"), key, payload=tamper(PAYLOAD))
    staging = tmp_path / "staging"
    error = await refusal(checker(release_server, key, staging))
    assert error.check == check and error.message.startswith(message)
    assert list(staging.iterdir()) == []


@pytest.mark.parametrize("refused", ["signature", "version", "size"])
async def test_a_refusal_also_drops_an_update_staged_earlier(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path, refused: str) -> None:
    staging = tmp_path / "staging"
    release_server.publish(feed_for("0.2.0"), key)
    await checker(release_server, key, staging).check()
    assert list(staging.iterdir()) != []
    if refused == "signature":
        release_server.publish(feed_for("0.3.0"), ReleaseKey.make(tmp_path, "impostor.key"))
    elif refused == "version":
        release_server.publish(feed_for("0.0.9"), key)
    else:
        release_server.publish(feed_for("0.3.0", payload=PAYLOAD + b"3"), key, payload=PAYLOAD + b"3 tampered")
    error = await refusal(checker(release_server, key, staging))
    assert error.check == refused and list(staging.iterdir()) == []


async def test_an_absolute_artefact_url_is_followed(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    absolute = release_server.feed_url.replace("feed.json", APPIMAGE)
    release_server.publish(feed_for("0.2.0", url=absolute), key)
    result = await checker(release_server, key, tmp_path / "staging").check()
    assert isinstance(result, UpdateReady) and result.staged.path.read_bytes() == PAYLOAD


async def test_a_feed_with_no_build_for_this_platform_says_so(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0", platform="windows-x86_64-exe"), key)
    error = await refusal(checker(release_server, key, tmp_path / "staging"))
    assert error.message == ("Platform check failed: MirbadLLM 0.2.0 has no linux-x86_64-appimage build in the "
                             "feed")


async def test_an_os_without_an_installer_hears_of_the_release_without_a_download(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    release_server.publish(feed_for("0.2.0", platform="macos-arm64-dmg"), key)
    installer = FakeInstaller("macos-arm64-dmg", unsupported="installing updates is not supported on macOS yet")
    error = await refusal(checker(release_server, key, tmp_path / "staging", installer=installer))
    assert error.message == "MirbadLLM 0.2.0 is available, but installing updates is not supported on macOS yet"
    assert release_server.hits[APPIMAGE] == 0


async def test_a_signed_feed_for_another_channel_is_refused(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    feed = feed_for("0.2.0").model_copy(update={"channel": "beta"})
    release_server.publish(feed, key)
    error = await refusal(checker(release_server, key, tmp_path / "staging", channel="stable"))
    assert error.message == "Channel check failed: the feed is for the 'beta' channel, this app follows 'stable'"


async def test_an_unreachable_feed_is_a_clear_error(key: ReleaseKey, tmp_path: Path,
                                                    unused_tcp_port: int) -> None:
    check = UpdateChecker(f"http://127.0.0.1:{unused_tcp_port}/feed.json", current_version="0.1.0",
                          installer=FakeInstaller(), staging_dir=tmp_path / "staging", trusted_keys=[key.public])
    error = await refusal(check)
    assert error.check == "feed" and error.message.startswith(
        f"Could not fetch the update feed http://127.0.0.1:{unused_tcp_port}/feed.json: ")


def test_the_staged_checksum_is_the_feeds(tmp_path: Path) -> None:
    assert feed_for("0.2.0").artefacts[0].sha256 == hashlib.sha256(PAYLOAD).hexdigest()


async def test_a_staged_update_installs_over_the_appimage_and_keeps_the_old_one(
        release_server: ReleaseServer, key: ReleaseKey, tmp_path: Path) -> None:
    target = tmp_path / "Applications" / "MirbadLLM.AppImage"
    target.parent.mkdir()
    target.write_bytes(b"the 0.1.0 build")
    installer = AppImageInstaller(target)
    release_server.publish(feed_for("0.2.0"), key)
    check = UpdateChecker(release_server.feed_url, current_version="0.1.0", installer=installer,
                          staging_dir=tmp_path / "staging", trusted_keys=[key.public])
    result = await check.check()
    assert isinstance(result, UpdateReady)
    assert installer.apply(result.staged) == target
    assert target.read_bytes() == PAYLOAD and target.with_name("MirbadLLM.AppImage.old").read_bytes() == b"the 0.1.0 build"
