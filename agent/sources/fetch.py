"""One file over HTTP into the models folder: guarded redirects, resume, checksum, atomic rename.

The body goes to ``.{name}.partial`` beside the target and is renamed into place only after its
size and checksum match what the source promised. A cut connection is resumed with ``Range``
(the bytes already written are hashed again first); a failure after the last attempt, a checksum
mismatch or a cancel deletes the partial file, so nothing half-written is ever left behind,
except on a pause (``FetchSettings.keep_partial`` says so when the cancel comes): the partial and its
sidecar stay for the resume. A partial left by an agent that was killed is resumed by the next download of the same file (its
``.json`` sidecar names the source), or deleted.

Redirects are followed by hand, each hop checked by the ``UrlPolicy`` and its resolver before any
connection; ``Authorization`` goes only to the origin it was meant for (CVE-2025-51471).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from agent.problems import AgentProblem
from agent.sources.url_guard import GuardedResolver, SourceRefused, UrlPolicy, precheck
from core.hashing import update_from_file

_LOGGER = logging.getLogger(__name__)

MAX_REDIRECTS = 10
ATTEMPTS = 3
CHUNK = 1 << 20
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=60)
Progress = Callable[[int], None]


class DownloadFailed(AgentProblem, status=502, code="download_failed"):
    pass


class ChecksumMismatch(DownloadFailed):
    code = "checksum_mismatch"


class DiskFull(DownloadFailed, status=507, code="disk_full"):
    pass


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def _check_room(target: Path, needed: int) -> None:
    """Refuse before any byte when the file cannot fit where it goes."""
    free = shutil.disk_usage(target.parent).free
    if needed > free:
        raise DiskFull(f"not enough space for {target.name} in {target.parent}: it needs {_mib(needed)}, "
                       f"the disk has {_mib(free)} free; free some space or choose another folder")


@dataclass(frozen=True)
class Expected:
    """What the source promised; ``sha256`` or ``git_sha1`` (a small file kept in git) is checked."""

    size: int | None = None
    sha256: str | None = None
    git_sha1: str | None = None
    identity: str = ""  # names the source in the resume sidecar


@dataclass
class FetchSettings:
    policy: UrlPolicy
    auth: dict[str, str] = field(default_factory=dict)  # sent only to ``auth_origin``
    auth_origin: tuple[str, str, int] | None = None
    resolver: AbstractResolver | None = None  # a test seam; default: the system resolver
    max_bytes: int = 1 << 40
    keep_partial: Callable[[], bool] = lambda: False  # asked on a cancel: True for a pause


def partial_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.partial")


def discard_partial(target: Path) -> None:
    for path in (partial_path(target), partial_path(target).with_suffix(".partial.json")):
        path.unlink(missing_ok=True)


def _hasher(expected: Expected) -> Any:
    if expected.sha256 is None and expected.git_sha1 is not None and expected.size is not None:
        digest = hashlib.sha1()
        digest.update(f"blob {expected.size}\0".encode())
        return digest
    return hashlib.sha256()


def _resume_offset(target: Path, expected: Expected) -> int:
    part, sidecar = partial_path(target), partial_path(target).with_suffix(".partial.json")
    try:
        same = json.loads(sidecar.read_text())["identity"] == expected.identity and bool(expected.identity)
        size = part.stat().st_size
    except (OSError, ValueError, KeyError, TypeError):
        same, size = False, 0
    if not same or (expected.size is not None and size > expected.size):
        discard_partial(target)
        return 0
    return size


def _seek_truncate(out: Any, offset: int) -> None:
    out.seek(offset)
    out.truncate()


def _finish(out: Any, rest: bytes) -> None:
    """Write what is left and close: a partial file holds every byte received, for a resume."""
    try:
        out.write(rest)
        out.flush()
        os.fsync(out.fileno())
    finally:
        out.close()


async def open_guarded(session: aiohttp.ClientSession, url: URL, settings: FetchSettings, headers: dict[str, str],
                resolver: AbstractResolver) -> aiohttp.ClientResponse:
    """GET ``url`` following redirects by hand, each hop checked before it is dialled."""
    for _hop in range(MAX_REDIRECTS + 1):
        url = settings.policy.check_url(url)
        await precheck(settings.policy, url, resolver)
        hop_headers = dict(headers)
        if settings.auth_origin == (url.scheme, (url.host or "").lower(), url.port or 0):
            hop_headers.update(settings.auth)
        resp = await session.get(url, headers=hop_headers, allow_redirects=False, timeout=TIMEOUT)
        if resp.status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
            location = resp.headers["Location"]
            resp.release()
            nxt = url.join(URL(location))
            if url.scheme == "https" and nxt.scheme == "http":
                raise SourceRefused(f"refusing a redirect from https down to http ({nxt.host})")
            url = nxt
            continue
        return resp
    raise DownloadFailed(f"more than {MAX_REDIRECTS} redirects")


def _check_status(resp: aiohttp.ClientResponse, offset: int) -> int:
    """The offset the body starts at (0 when the server ignored the range)."""
    if resp.status == 206 and offset:
        start = resp.headers.get("Content-Range", "").removeprefix("bytes ").split("-", 1)[0]
        if start.isdigit() and int(start) == offset:
            return offset
        raise DownloadFailed("the server answered the resume with a different range")
    if resp.status == 200:
        return 0
    if resp.status in (401, 403):
        raise DownloadFailed(f"the source refused access ({resp.status}); a token may be needed",
                             status=resp.status, code="access_denied")
    if resp.status == 404:
        raise DownloadFailed("the source has no such file (404)", status=404, code="not_found")
    raise DownloadFailed(f"the source answered {resp.status}")


async def _attempt(session: aiohttp.ClientSession, url: URL, target: Path, expected: Expected,
                   settings: FetchSettings, resolver: AbstractResolver, progress: Progress) -> Any:
    part = partial_path(target)
    offset = _resume_offset(target, expected)
    if expected.size is not None:
        _check_room(target, expected.size - offset)
    part.with_suffix(".partial.json").write_text(json.dumps({"identity": expected.identity}))
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    resp = await open_guarded(session, url, settings, headers, resolver)
    async with resp:
        offset = _check_status(resp, offset)
        hasher = _hasher(expected)
        if offset:
            await asyncio.to_thread(update_from_file, hasher, part, limit=offset)
        done = offset
        out = await asyncio.to_thread(open, part, "r+b" if offset else "wb")
        pending: list[bytes] = []  # written in blocks of about CHUNK; flushed even on a failure
        try:
            await asyncio.to_thread(_seek_truncate, out, offset)
            async for block in resp.content.iter_any():
                done += len(block)
                if done > settings.max_bytes or (expected.size is not None and done > expected.size):
                    raise DownloadFailed("the source sent more bytes than it promised")
                hasher.update(block)
                pending.append(block)
                if sum(map(len, pending)) >= CHUNK:
                    await asyncio.to_thread(out.write, b"".join(pending))
                    pending.clear()
                progress(done)
        finally:
            await asyncio.to_thread(_finish, out, b"".join(pending))
    if expected.size is not None and done != expected.size:
        raise aiohttp.ClientPayloadError(f"got {done} of {expected.size} bytes")
    return hasher


async def fetch_file(url: str | URL, target: Path, expected: Expected, settings: FetchSettings,
                     progress: Progress = lambda _n: None) -> str:
    """Download ``url`` to ``target`` and verify it; returns its SHA-256 (when that was checked)."""
    inner = settings.resolver if settings.resolver is not None else ThreadedResolver()
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(settings.policy, inner), use_dns_cache=False,
                                     limit=4)
    try:
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         cookie_jar=aiohttp.DummyCookieJar()) as session:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    hasher = await _attempt(session, URL(url) if isinstance(url, str) else url, target,
                                            expected, settings, inner, progress)
                    break
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError) as exc:
                    if attempt == ATTEMPTS:
                        raise DownloadFailed(f"the connection failed {ATTEMPTS} times: {exc}") from exc
                    _LOGGER.info("download of %s interrupted (%s); resuming", target.name, exc)
        digest = hasher.hexdigest()
        wanted = expected.sha256 or expected.git_sha1
        if wanted is not None and digest != wanted:
            raise ChecksumMismatch(f"{target.name} does not match its checksum: expected {wanted}, got {digest}")
        os.replace(partial_path(target), target)
        partial_path(target).with_suffix(".partial.json").unlink(missing_ok=True)
        return digest if expected.sha256 is not None or expected.git_sha1 is None else ""
    except OSError as exc:
        discard_partial(target)  # the space it took is given back
        if exc.errno == errno.ENOSPC:
            raise DiskFull(f"the disk holding {target.parent} filled up while {target.name} was downloaded; "
                           "nothing was kept: free some space and try again") from exc
        raise
    except asyncio.CancelledError:
        if not settings.keep_partial():
            discard_partial(target)
        raise
    except BaseException:
        discard_partial(target)
        raise
