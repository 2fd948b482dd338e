"""``UpdateChecker``: fetch the signed feed, refuse what does not check out, stage the new build.

The order is the point: the signature is checked over the feed's raw bytes before any of them is
parsed; then the version (a feed not newer than the running program is a downgrade or a replay);
then the artefact's bytes against the size and SHA-256 the signed feed lists. Each refusal is an
``UpdateError`` whose message starts with the check that failed, and leaves nothing staged.
The feed's fetch and the artefact's download are ``core.releases.fetch``, shared with the daemon's
GPU runtime packs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import aiohttp
from packaging.version import Version
from yarl import URL

from app.updates.installer import Installer
from app.updates.staging import (
    StagedUpdate,
    StagingFolder,
    UpdateReady,
    UpdateResult,
    UpToDate,
)
from core.hashing import file_sha256
from core.releases.feed import ReleaseArtefact, ReleaseFeed
from core.releases.fetch import (
    UpdateError,
    download_artefact,
    fetch_signed_feed,
    signature_url,
)
from core.releases.signing import RELEASE_PUBLIC_KEYS

_LOGGER = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


class UpdateChecker:
    def __init__(self, feed_url: str, *, current_version: str, installer: Installer, staging_dir: Path,
                 trusted_keys: Sequence[str] = RELEASE_PUBLIC_KEYS, channel: str | None = None,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.feed_url = URL(feed_url)
        self.current_version = current_version
        self.installer = installer
        self.staging = StagingFolder(staging_dir)
        self.trusted_keys = tuple(trusted_keys)
        self.channel = channel
        self._session = session

    @property
    def signature_url(self) -> URL:
        return signature_url(self.feed_url)

    async def check(self) -> UpdateResult:
        """Up to date, or the verified update staged; raises ``UpdateError`` (nothing staged) if refused."""
        if self.feed_url.scheme not in ("http", "https"):
            raise UpdateError("feed", f"Feed check failed: {self.feed_url} is not an http(s) URL")
        try:
            if self._session is not None:
                return await self._check(self._session)
            async with aiohttp.ClientSession() as session:
                return await self._check(session)
        except UpdateError as exc:
            _LOGGER.warning("update refused: %s", exc.message)
            self.staging.clear()
            raise
        except BaseException:
            self.staging.clear()
            raise

    async def _check(self, session: aiohttp.ClientSession) -> UpdateResult:
        feed = await fetch_signed_feed(session, self.feed_url, self.trusted_keys)
        if self.channel and feed.channel != self.channel:
            raise UpdateError("channel", f"Channel check failed: the feed is for the {feed.channel!r} channel, "
                                         f"this app follows {self.channel!r}")
        latest, current = Version(feed.version), Version(self.current_version)
        if latest == current:
            self.staging.clear()
            return UpToDate(self.current_version, feed.version)
        if latest < current:
            raise UpdateError("version", f"Version check failed: the feed offers {feed.version}, older than the "
                                         f"running {self.current_version} (a downgrade or a replayed old feed); "
                                         "nothing was downloaded")
        if self.installer.unsupported:
            raise UpdateError("platform", f"MirbadLLM {feed.version} is available, but {self.installer.unsupported}")
        artefact = feed.artefact_for(self.installer.platform)
        if artefact is None:
            raise UpdateError("platform", f"Platform check failed: MirbadLLM {feed.version} has no "
                                          f"{self.installer.platform} build in the feed")
        staged = await self._stage(session, feed, artefact)
        return UpdateReady(staged)

    def _artefact_url(self, artefact: ReleaseArtefact) -> URL:
        url = self.feed_url.join(URL(artefact.url))
        if url.scheme not in ("http", "https"):
            raise UpdateError("feed", f"Feed check failed: artefact URL {artefact.url!r} is not http(s)")
        return url

    def _file_name(self, feed: ReleaseFeed, url: URL) -> str:
        name = url.name
        return name if _SAFE_NAME.match(name) else f"mirbadllm-{feed.version}-{self.installer.platform}"

    async def _stage(self, session: aiohttp.ClientSession, feed: ReleaseFeed,
                     artefact: ReleaseArtefact) -> StagedUpdate:
        url = self._artefact_url(artefact)
        name = self._file_name(feed, url)
        final = self.staging.final(name)
        staged = StagedUpdate(feed.version, artefact.platform, final, artefact.size, artefact.sha256)
        loop = asyncio.get_running_loop()
        self.staging.prepare()
        if (final.is_file() and final.stat().st_size == artefact.size
                and await loop.run_in_executor(None, file_sha256, final) == artefact.sha256):
            self.staging.clear(keep=final)
            return staged  # verified by an earlier check that was not applied yet
        self.staging.clear()
        partial = self.staging.partial(name)
        try:
            await download_artefact(session, url, artefact, partial)
            os.replace(partial, final)
        finally:
            partial.unlink(missing_ok=True)
        _LOGGER.info("staged MirbadLLM %s (%s, %d bytes) at %s", feed.version, artefact.platform, artefact.size,
                     final)
        return staged
