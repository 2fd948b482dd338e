"""``UpdateChecker``: fetch the signed feed, refuse what does not check out, stage the new build.

The order is the point: the signature is checked over the feed's raw bytes before any of them is
parsed; then the version (a feed not newer than the running program is a downgrade or a replay);
then the artefact's bytes against the size and SHA-256 the signed feed lists. Each refusal is an
``UpdateError`` whose message starts with the check that failed, and leaves nothing staged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import aiohttp
from packaging.version import Version
from pydantic import ValidationError
from yarl import URL

from daemon.api.updates.feed import (
    SIGNATURE_SUFFIX,
    ReleaseArtefact,
    ReleaseFeed,
    file_sha256,
)
from daemon.api.updates.installer import Installer
from daemon.api.updates.signing import RELEASE_PUBLIC_KEYS, verify_feed_signature
from daemon.api.updates.staging import (
    StagedUpdate,
    StagingFolder,
    UpdateError,
    UpdateReady,
    UpdateResult,
    UpToDate,
)

_LOGGER = logging.getLogger(__name__)

MAX_FEED_BYTES = 1 << 20
MAX_SIGNATURE_BYTES = 4096
CHUNK = 1 << 20
FEED_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=10)
# An artefact is hundreds of MB: no total deadline, but a stalled connection fails.
DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=15, sock_read=60)
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


def signature_url(feed_url: URL) -> URL:
    return feed_url.with_name(feed_url.name + SIGNATURE_SUFFIX)


async def fetch_signed_feed(session: aiohttp.ClientSession, feed_url: URL,
                            trusted_keys: Sequence[str]) -> ReleaseFeed:
    """The feed at ``feed_url``, its signature checked over the raw bytes before any is parsed
    (``UpdateError`` "feed", "signature"); shared by app updates and GPU runtime packs."""
    raw = await _fetch(session, feed_url, MAX_FEED_BYTES, "feed")
    signature = await _fetch(session, signature_url(feed_url), MAX_SIGNATURE_BYTES, "signature")
    why = verify_feed_signature(raw, signature, trusted_keys)
    if why:
        raise UpdateError("signature", f"Signature check failed: {why}; the update was not used")
    return _parse(raw)


async def _fetch(session: aiohttp.ClientSession, url: URL, cap: int, what: str) -> bytes:
    try:
        async with session.get(url, timeout=FEED_TIMEOUT) as resp:
            if resp.status == 404 and what == "signature":
                raise UpdateError("signature", f"Signature check failed: no signature at {url} (HTTP 404); "
                                               "an unsigned feed is never used")
            if resp.status != 200:
                raise UpdateError(what, f"Could not fetch the update {what} {url}: HTTP {resp.status}")
            data = bytearray()
            async for chunk in resp.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > cap:
                    raise UpdateError(what, f"{what.capitalize()} check failed: the {what} at {url} is larger than "
                                            f"{cap} bytes")
            return bytes(data)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise UpdateError(what, f"Could not fetch the update {what} {url}: {exc or type(exc).__name__}") from exc


def _parse(raw: bytes) -> ReleaseFeed:
    try:
        return ReleaseFeed.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = ".".join(str(p) for p in first["loc"]) + ": " + first["msg"] if first else str(exc)
        raise UpdateError("feed", f"Feed check failed: the signed feed is not a MirbadLLM release feed "
                                  f"({where})") from exc


async def download_artefact(session: aiohttp.ClientSession, url: URL, artefact: ReleaseArtefact,
                            partial: Path) -> None:
    """Download ``url`` into ``partial``, refused (``UpdateError``) unless its size and SHA-256 are
    the signed feed's; the caller renames it into place."""
    loop = asyncio.get_running_loop()
    digest, received = hashlib.sha256(), 0
    try:
        async with session.get(url, timeout=DOWNLOAD_TIMEOUT) as resp:
            if resp.status != 200:
                raise UpdateError("download", f"Download failed: {url} answered HTTP {resp.status}")
            with partial.open("wb") as fh:
                async for chunk in resp.content.iter_chunked(CHUNK):
                    received += len(chunk)
                    if received > artefact.size:
                        raise UpdateError("size", f"Size check failed: {url.name} is larger than the "
                                                  f"{artefact.size} bytes the feed lists")
                    digest.update(chunk)
                    await loop.run_in_executor(None, fh.write, chunk)
                await loop.run_in_executor(None, _flush, fh)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise UpdateError("download", f"Download failed: {url}: {exc or type(exc).__name__}") from exc
    if received != artefact.size:
        raise UpdateError("size", f"Size check failed: {url.name} is {received} bytes, the feed lists "
                                  f"{artefact.size}")
    if digest.hexdigest() != artefact.sha256:
        raise UpdateError("checksum", f"Checksum check failed: the SHA-256 of {url.name} is "
                                      f"{digest.hexdigest()}, the feed lists {artefact.sha256}")


def _flush(fh: BinaryIO) -> None:
    fh.flush()
    os.fsync(fh.fileno())
