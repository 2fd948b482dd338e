"""Hugging Face as a model source: file metadata, picking files by name or quant, header by ranges.

``huggingface_hub`` builds the URLs (``hf_hub_url``), reads each file's metadata
(``get_hf_file_metadata``: size, commit, and the ``X-Linked-Etag`` that is the SHA-256 of an LFS
file, or the git SHA-1 of a small one) and lists a repo (``HfApi.list_repo_files``). The bytes
come through ``agent.sources.fetch`` so that every redirect is checked and the token stays on the hub.
``HF_ENDPOINT`` is read when a call is made, so tests and mirrors point it at their own hub.
A repo, revision or file name is checked (``core.safe_names``) before any URL is built.
``huggingface_hub`` (and its HTTP stack) is imported when the hub is first asked, not when the agent starts.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import os
import re
import socket
from dataclasses import dataclass

import aiohttp
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from agent.api.sources import GgufSummary, HfFileRef
from agent.gguf_facts import shard_names, summarize
from agent.gguf_reader import GgufError, read_header_ranged
from agent.problems import AgentProblem, InvalidModelFile
from agent.sources.fetch import DownloadFailed, Expected, FetchSettings, open_guarded
from agent.sources.url_guard import GuardedResolver, UrlPolicy, is_public
from core.safe_names import (
    UnsafeName,
    check_hf_repo,
    check_hf_revision,
    check_relative_name,
)

METADATA_TIMEOUT_S = 20.0
RESOLVE_TIMEOUT_S = 5.0  # the hub's name looked up first: offline is said at once, not after the hub client's retries
MAX_LISTED = 20_000
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


class BadSourceRequest(AgentProblem, status=422, code="invalid_source"):
    pass


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """The token the hub client keeps (``HF_TOKEN`` or ``huggingface-cli login``); blocking: run it in a thread."""
    from huggingface_hub import get_token

    return get_token()


def origin_of(url: str | URL) -> tuple[str, str, int]:
    parsed = URL(url) if isinstance(url, str) else url
    return parsed.scheme, (parsed.host or "").lower(), parsed.port or 0


async def hub_settings(hub: str, token: str | None, allow_private: bool) -> FetchSettings:
    """The hub is trusted; its redirects may reach no further inside than the hub itself is."""
    scheme, host, port = origin_of(hub)
    try:
        infos = await asyncio.to_thread(socket.getaddrinfo, host, port or None, proto=socket.IPPROTO_TCP)
        hub_private = any(not is_public(ipaddress.ip_address(str(i[4][0]).split("%")[0])) for i in infos)
    except OSError:
        hub_private = False
    policy = UrlPolicy(allow_private=allow_private or hub_private, trusted=frozenset({(scheme, host, port)}))
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return FetchSettings(policy=policy, auth=auth, auth_origin=(scheme, host, port))


@dataclass(frozen=True)
class HfFile:
    repo: str
    path: str
    revision: str
    url: str
    size: int
    expected: Expected
    commit: str | None


def check_ref(ref: HfFileRef) -> None:
    try:
        check_hf_repo(ref.repo)
        check_hf_revision(ref.revision)
        if ref.file is not None and not any(c in ref.file for c in "*?["):
            check_relative_name(ref.file, "file")
    except UnsafeName as exc:
        raise BadSourceRequest(str(exc)) from exc
    if ref.file is None and ref.quant is None:
        raise BadSourceRequest("name a file (or a pattern such as *Q4_K_M*.gguf), or a quant such as Q4_K_M")


async def check_hub_reachable(hub: str) -> None:
    """Fail at once, in plain words, when this machine cannot look up the hub's name (offline, no
    DNS): the hub client would retry for most of a minute and then say "[Errno -2] Name or service
    not known"."""
    host = URL(hub).host
    if not host:
        raise DownloadFailed(f"the hub address {hub!r} has no host name", status=422, code="invalid_request")
    try:
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(host, None), RESOLVE_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise DownloadFailed(f"this machine cannot reach {host}: it looks offline (its name does not resolve: "
                             f"{getattr(exc, 'strerror', None) or type(exc).__name__}). Connect it to the internet, "
                             "or add a file already on the node.", status=502, code="hub_unreachable") from exc


async def file_info(repo: str, path: str, revision: str, token: str | None, hub: str) -> HfFile:
    """Metadata of one file; refuses a file without a usable checksum before anything is fetched."""
    await check_hub_reachable(hub)
    try:
        check_relative_name(path, "file")
    except UnsafeName as exc:
        raise BadSourceRequest(str(exc)) from exc
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    url = hf_hub_url(repo, path, revision=revision, endpoint=hub)
    try:
        meta = await asyncio.to_thread(get_hf_file_metadata, url, token=token or False, endpoint=hub,
                                       timeout=METADATA_TIMEOUT_S)
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise DownloadFailed(f"{repo}: the repo is missing, private or gated: {exc}", status=404,
                             code="not_found") from exc
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", 502)
        raise DownloadFailed(f"{repo}/{path}: the hub answered {status}", status=404 if status == 404 else 502,
                             code="not_found" if status == 404 else "download_failed") from exc
    except Exception as exc:
        raise DownloadFailed(f"cannot reach the hub at {hub}: {exc}") from exc
    etag = (meta.etag or "").lower()
    commit = meta.commit_hash if meta.commit_hash and _SHA1.fullmatch(meta.commit_hash) else None
    if meta.size is None or meta.size < 0:
        raise DownloadFailed(f"the hub gave no size for {path}", code="checksum_unavailable")
    if _SHA256.fullmatch(etag):
        expected = Expected(size=meta.size, sha256=etag, identity=f"hf:{repo}:{path}:{etag}")
    elif _SHA1.fullmatch(etag):
        expected = Expected(size=meta.size, git_sha1=etag, identity=f"hf:{repo}:{path}:{etag}")
    else:
        raise DownloadFailed(f"the hub gave no usable checksum for {path} (etag {etag[:80]!r}); refusing an "
                             "unverifiable download", code="checksum_unavailable")
    return HfFile(repo, path, revision, url, meta.size, expected, commit)


async def list_files(repo: str, revision: str, token: str | None, hub: str) -> list[str]:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    def listing() -> list[str]:
        return HfApi(endpoint=hub).list_repo_files(repo, revision=revision, token=token or False)[:MAX_LISTED]

    await check_hub_reachable(hub)
    try:
        return await asyncio.to_thread(listing)
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise DownloadFailed(f"{repo}: the repo is missing, private or gated", status=404, code="not_found") from exc
    except Exception as exc:
        raise DownloadFailed(f"cannot list {repo} on {hub}: {exc}") from exc


def pick_files(files: list[str], ref: HfFileRef, with_projector: bool) -> tuple[list[str], str | None]:
    """The model file (with its shards) the ref names, and the repo's vision projector if wanted."""
    ggufs = [f for f in files if f.lower().endswith(".gguf")]
    projectors = [f for f in ggufs if "mmproj" in f.rsplit("/", 1)[-1].lower()]
    models = [f for f in ggufs if f not in projectors]
    if ref.file:
        chosen = [f for f in models if fnmatch.fnmatchcase(f.lower(), ref.file.lower())]
    else:
        quant = re.escape((ref.quant or "").lower())
        chosen = [f for f in models if re.search(rf"(^|[^a-z0-9]){quant}([^a-z0-9]|$)", f.lower())]
    if not chosen:
        raise BadSourceRequest(f"no GGUF file in {ref.repo} matches {ref.file or ref.quant!r}",
                               status=404, code="not_found")
    first = min(chosen)
    group = {first.rsplit("/", 1)[0] + "/" + n if "/" in first else n
             for n in shard_names(first.rsplit("/", 1)[-1])}
    if set(chosen) - group:
        raise BadSourceRequest(f"{ref.file or ref.quant!r} matches several models in {ref.repo}: "
                               f"{', '.join(sorted(chosen)[:6])}; name one file")
    missing = group - set(files)
    if missing:
        raise BadSourceRequest(f"{first} is split, and {min(missing)} is not in the repo")
    projector = None
    if with_projector and projectors:
        projector = next((p for p in projectors if "f16" in p.lower()), min(projectors))
    return sorted(group), projector


async def remote_summary(files: list[HfFile], settings: FetchSettings) -> GgufSummary:
    """The summary from the first file's header, read by HTTP ranges; nothing is written to disk."""
    first = files[0]
    resolver = settings.resolver if settings.resolver is not None else ThreadedResolver()
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(settings.policy, resolver), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:

        async def fetch(start: int, end: int) -> bytes:
            headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
            resp = await open_guarded(session, URL(first.url), settings, headers, resolver)
            async with resp:
                if resp.status not in (200, 206):
                    raise DownloadFailed(f"the hub answered {resp.status} to a range read of {first.path}")
                if resp.status == 200 and start:
                    raise DownloadFailed("the hub does not support range reads")
                return await resp.content.readexactly(end - start)

        try:
            header = await read_header_ranged(fetch, first.size)
        except GgufError as exc:
            raise InvalidModelFile(f"{first.path} is not a usable GGUF file: {exc}") from exc
        except (asyncio.IncompleteReadError, aiohttp.ClientPayloadError) as exc:  # a connection cut mid-answer
            raise DownloadFailed(f"the hub sent a short answer for {first.path}; try again") from exc
    return summarize(header, sum(f.size for f in files[1:]))
