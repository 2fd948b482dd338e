"""The agent release a rollout ships: a signed feed and the agent builds it names, staged locally.

The folder (``{home}/agent-release/`` unless the request names another) holds ``feed.json``, its
detached Ed25519 signature ``feed.json.sig`` and each agent build (and the Debian package, for
agents the .deb installed) under the file name of its URL. The signature is checked over the raw
bytes before parsing (``verify_feed_signature``, the same check the app's updates use); every
``agent-*`` build or ``linux-*-deb`` package present must then match the feed's size and SHA-256. A refusal is an ``UpdateError`` naming the check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from pydantic import ValidationError

from agent.api.upgrade import is_node_artefact
from core.hashing import file_sha256
from core.releases.feed import (
    FEED_NAME,
    SIGNATURE_SUFFIX,
    ReleaseArtefact,
    ReleaseFeed,
)
from core.releases.fetch import UpdateError
from core.releases.signing import verify_feed_signature


@dataclass(frozen=True)
class StagedBuild:
    artefact: ReleaseArtefact
    path: Path


@dataclass(frozen=True)
class StagedRelease:
    feed: ReleaseFeed
    builds: dict[str, StagedBuild]  # platform -> build

    @property
    def version(self) -> str:
        return self.feed.version


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UpdateError("staging", f"No staged agent release: cannot read {what} {path} ({exc.strerror}); "
                                     f"put feed.json, feed.json.sig and the agent builds in {path.parent}") from exc


def load_release(folder: Path, trusted_keys: Sequence[str]) -> StagedRelease:
    """The verified release in ``folder``. Blocking (it hashes every build)."""
    data = _read(folder / FEED_NAME, "the feed")
    signature = _read(folder / (FEED_NAME + SIGNATURE_SUFFIX), "the feed's signature")
    why = verify_feed_signature(data, signature, trusted_keys)
    if why is not None:
        raise UpdateError("signature", f"Signature check failed: {why}")
    try:
        feed = ReleaseFeed.model_validate_json(data)
    except ValidationError as exc:
        raise UpdateError("feed", f"The signed feed is not a release feed: {exc.errors()[0]['msg']}") from None
    builds: dict[str, StagedBuild] = {}
    for artefact in feed.artefacts:
        if not is_node_artefact(artefact.platform):
            continue
        path = folder / PurePosixPath(urlparse(artefact.url).path).name
        if not path.is_file():
            continue  # a platform no node here runs needs no build; a node that does is refused later
        size = path.stat().st_size
        if size != artefact.size:
            raise UpdateError("size", f"Size check failed: {path.name} is {size} bytes, the feed says "
                                      f"{artefact.size}")
        if file_sha256(path) != artefact.sha256:
            raise UpdateError("checksum", f"Checksum check failed: {path.name} does not have the SHA-256 "
                                          "the signed feed names")
        builds[artefact.platform] = StagedBuild(artefact, path)
    if not builds:
        raise UpdateError("staging", f"The release {feed.version} in {folder} holds no agent build")
    return StagedRelease(feed, builds)


async def load_release_async(folder: Path, trusted_keys: Sequence[str]) -> StagedRelease:
    return await asyncio.get_running_loop().run_in_executor(None, load_release, folder, trusted_keys)
