"""Downloads as transfers: a Hugging Face file (by name, pattern or quant) or a plain URL.

Names are checked before the transfer starts (``check_download``: a bad repo, file or target is a
422 at once, nothing created). Inside the transfer the hub is asked for each file's size and
checksum before a byte of it is fetched; each file is fetched by ``agent.sources.fetch`` and its header
read once it is complete: a file that is not a usable GGUF model is deleted again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp.abc import AbstractResolver
from yarl import URL

from agent.admission import inspect_file
from agent.api.sources import DownloadRequest, HfFileRef, ImportedModel, SourceFile
from agent.gguf_facts import shard_names
from agent.problems import InvalidModelFile
from agent.sources.fetch import Expected, FetchSettings, fetch_file
from agent.sources.huggingface import (
    BadSourceRequest,
    HfFile,
    check_ref,
    file_info,
    hub_endpoint,
    hub_settings,
    hub_token,
    list_files,
    pick_files,
)
from agent.sources.store import ModelStore, slug
from agent.sources.transfers import TransferHandle
from agent.sources.url_guard import UrlPolicy
from core.safe_names import UnsafeName, check_component

URL_FOLDER = "downloads"


@dataclass
class DownloadContext:
    store: ModelStore
    allow_private: bool = False
    resolver: AbstractResolver | None = None  # a test seam for DNS answers


def default_folder(repo: str) -> str:
    return repo.replace("/", "--")


def url_file_name(url: URL) -> str:
    name = url.name
    try:
        check_component(name, "file name")
    except UnsafeName as exc:
        raise BadSourceRequest(f"the URL does not end in a usable file name: {exc}") from exc
    if not name.lower().endswith(".gguf"):
        raise BadSourceRequest(f"{name!r} is not a .gguf file")
    return name


def check_download(req: DownloadRequest, ctx: DownloadContext) -> str:
    """Check every name in the request before anything runs; the transfer's label."""
    if (req.hf is None) == (req.url is None):
        raise BadSourceRequest("give either hf (repo and file) or url")
    if req.target is not None:
        ctx.store.check_folder_name(req.target)
    if req.hf is not None:
        check_ref(req.hf)
        if req.hf.file and not any(c in req.hf.file for c in "*?["):
            ctx.store.target(req.target or default_folder(req.hf.repo), req.hf.file)
        return f"{req.hf.repo} {req.hf.file or req.hf.quant}"
    url = UrlPolicy(allow_private=ctx.allow_private).check_url(req.url or "")
    ctx.store.target(req.target or URL_FOLDER, url_file_name(url))
    return str(url.with_query(None).with_fragment(None))[:300]


async def hf_files(ref: HfFileRef, with_projector: bool, token: str | None, hub: str) -> tuple[list[str], str | None]:
    pattern = ref.file is None or any(c in ref.file for c in "*?[")
    if not pattern and not with_projector:
        return shard_names_in(ref.file or ""), None
    try:
        listing = await list_files(ref.repo, ref.revision, token, hub)
    except Exception:
        if pattern:
            raise
        return shard_names_in(ref.file or ""), None  # the projector is a nicety; the file is named
    if not pattern:
        listing = sorted(set(listing) | set(shard_names_in(ref.file or "")))
    return pick_files(listing, ref, with_projector)


def shard_names_in(path: str) -> list[str]:
    folder, _, name = path.rpartition("/")
    return [f"{folder}/{n}" if folder else n for n in shard_names(name)]


def _offset(handle: TransferHandle, base: int) -> Callable[[int], None]:
    """Progress of one file as progress of the whole transfer."""
    return lambda done: handle.progress(base + done)


async def _fetch_all(files: list[HfFile], folder: str, handle: TransferHandle, ctx: DownloadContext,
                     settings: FetchSettings) -> list[Path]:
    handle.stage("downloading", total=sum(f.size for f in files), files=[f.path for f in files])
    paths: list[Path] = []
    done_before = 0
    for item in files:
        target = ctx.store.prepare(ctx.store.target(folder, item.path))
        handle.partials.append(target)
        await fetch_file(item.url, target, item.expected, settings, _offset(handle, done_before))
        done_before += item.size
        handle.progress(done_before)
        paths.append(target)
    return paths


async def run_hf(req: DownloadRequest, handle: TransferHandle, ctx: DownloadContext) -> list[ImportedModel]:
    ref = req.hf
    assert ref is not None
    hub = hub_endpoint()
    token = req.token or await asyncio.to_thread(hub_token)
    handle.stage("listing")
    model_files, projector = await hf_files(ref, req.with_projector, token, hub)
    infos = [await file_info(ref.repo, path, ref.revision, token, hub) for path in model_files]
    if projector is not None:
        infos.append(await file_info(ref.repo, projector, ref.revision, token, hub))
    settings = await hub_settings(hub, token, ctx.allow_private)
    settings.resolver = ctx.resolver
    settings.keep_partial = lambda: handle.pausing
    paths = await _fetch_all(infos, req.target or default_folder(ref.repo), handle, ctx, settings)
    handle.stage("verifying")
    await _check_model(paths[: len(model_files)])
    stem = model_files[0].rsplit("/", 1)[-1].removesuffix(".gguf")
    return [ImportedModel(
        name=slug(stem), model_path=str(paths[0]), projector_path=str(paths[-1]) if projector else None,
        size=sum(i.size for i in infos[: len(model_files)]), sha256=infos[0].expected.sha256,
        hf_repo=ref.repo, hf_file=model_files[0], revision=infos[0].commit or ref.revision,
        origin=f"hf:{ref.repo}/{model_files[0]}",
        files=[SourceFile(path=i.path, sha256=i.expected.sha256, size=i.size) for i in infos])]


async def run_url(req: DownloadRequest, handle: TransferHandle, ctx: DownloadContext) -> list[ImportedModel]:
    policy = UrlPolicy(allow_private=ctx.allow_private)
    url = policy.check_url(req.url or "")
    target = ctx.store.prepare(ctx.store.target(req.target or URL_FOLDER, url_file_name(url)))
    handle.stage("downloading", files=[target.name])
    handle.partials.append(target)
    settings = FetchSettings(policy=policy, resolver=ctx.resolver, keep_partial=lambda: handle.pausing)
    digest = await fetch_file(url, target, Expected(sha256=req.sha256, identity=f"url:{url}"), settings,
                              handle.progress)
    handle.stage("verifying")
    await _check_model([target])
    return [ImportedModel(name=slug(target.stem), model_path=str(target), size=target.stat().st_size,
                          sha256=digest or None, origin=f"url:{url.host}")]


async def _check_model(paths: list[Path]) -> None:
    """The first file must be a usable GGUF model; otherwise every downloaded file goes again."""
    try:
        summary = await asyncio.to_thread(inspect_file, str(paths[0]))
        if summary.is_projector:
            raise InvalidModelFile(f"{paths[0].name} is a vision projector, not a model")
    except InvalidModelFile:
        for path in paths:
            path.unlink(missing_ok=True)
        raise
