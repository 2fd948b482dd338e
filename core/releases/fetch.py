"""The signed release feed over HTTP: fetched with its signature checked over the raw bytes before
any is parsed, and artefacts downloaded against the size and SHA-256 it lists. Shared by the app's
updates (``app.updates``) and the daemon's GPU runtime packs (``daemon.runtimes.packs``).

Each refusal is an ``UpdateError`` whose ``check`` names what failed (feed, signature, download,
size, checksum) and whose message starts with it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import aiohttp
from pydantic import ValidationError
from yarl import URL

from core.releases.feed import SIGNATURE_SUFFIX, ReleaseArtefact, ReleaseFeed
from core.releases.signing import verify_feed_signature

MAX_FEED_BYTES = 1 << 20
MAX_SIGNATURE_BYTES = 4096
CHUNK = 1 << 20
FEED_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=10)
# An artefact is hundreds of MB: no total deadline, but a stalled connection fails.
DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=15, sock_read=60)


class UpdateError(Exception):
    """An update refused or failed; ``check`` names the check (signature, version, size, ...)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


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
