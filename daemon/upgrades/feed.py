"""The agent release fetched from the signed feed the app updated from, instead of a staged folder.

``fetch_release`` reads the feed with ``core.releases.fetch`` (its Ed25519 signature checked over the
raw bytes before any is parsed), refuses a feed whose version is not this daemon's own (the nodes
follow the daemon: an older feed is a downgrade or a replay, a newer one waits until this machine
is updated), then downloads each agent build (or Debian package) the nodes need into ``{home}/agent-release-feed/``
against the feed's size and SHA-256 (a build already there and matching is kept). A refusal is an
``UpdateError`` naming the check, and nothing is told to any node.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

import aiohttp
from packaging.version import InvalidVersion, Version
from yarl import URL

from agent.api.upgrade import is_node_artefact
from core.hashing import file_sha256
from core.releases.feed import ReleaseArtefact, ReleaseFeed
from core.releases.fetch import UpdateError, download_artefact, fetch_signed_feed
from daemon.upgrades.release import StagedBuild, StagedRelease

_LOGGER = logging.getLogger(__name__)

FOLDER = "agent-release-feed"


def _http(url: URL, what: str) -> URL:
    if url.scheme not in ("http", "https"):
        raise UpdateError("feed", f"Feed check failed: {what} {url} is not an http(s) URL")
    return url


def _same_version(feed: ReleaseFeed, daemon_version: str) -> None:
    if feed.version == daemon_version:
        return
    try:
        older = Version(feed.version) < Version(daemon_version)
    except InvalidVersion:
        older = False
    if older:
        raise UpdateError("version", f"Version check failed: the feed offers {feed.version}, older than this "
                                     f"daemon's {daemon_version} (a downgrade or a replayed old feed); no node was told")
    raise UpdateError("version", f"Version check failed: the feed offers {feed.version} but this daemon runs "
                                 f"{daemon_version}: update this machine first (Settings → Updates), then roll out")


async def _build(session: aiohttp.ClientSession, feed_url: URL, artefact: ReleaseArtefact, folder: Path) -> Path:
    url = _http(feed_url.join(URL(artefact.url)), f"the {artefact.platform} build's URL")
    path = folder / (PurePosixPath(url.path).name or artefact.platform)
    if (path.is_file() and path.stat().st_size == artefact.size
            and await asyncio.to_thread(file_sha256, path) == artefact.sha256):
        return path  # fetched by an earlier rollout of this release
    partial = folder / f".{path.name}.partial"
    try:
        await download_artefact(session, url, artefact, partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


async def fetch_release(feed_url: str, home: Path, platforms: Iterable[str], trusted_keys: Sequence[str],
                        daemon_version: str) -> StagedRelease:
    """The verified release of ``feed_url`` with a build for each of ``platforms`` the feed has."""
    url = _http(URL(feed_url), "the feed")
    folder = home / FOLDER
    async with aiohttp.ClientSession() as session:
        feed = await fetch_signed_feed(session, url, trusted_keys)
        _same_version(feed, daemon_version)
        wanted = [a for a in feed.artefacts if is_node_artefact(a.platform) and a.platform in set(platforms)]
        if not wanted:
            raise UpdateError("platform", f"Platform check failed: MirbadLLM {feed.version} has no agent build for "
                                          f"the nodes' platforms ({', '.join(sorted(set(platforms))) or 'none'})")
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        builds = {a.platform: StagedBuild(a, await _build(session, url, a, folder)) for a in wanted}
    _LOGGER.info("fetched agent %s for %s from %s", feed.version, ", ".join(sorted(builds)), url)
    return StagedRelease(feed, builds)
