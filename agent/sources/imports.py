"""Imports as transfers: a model from an existing Ollama store, or a folder of GGUF files.

Ollama names its blobs by digest. A manifest is read with a size cap, each digest must be exactly
``sha256:<64 hex>`` before a blob path is built from it (CVE-2024-37032 came from skipping that),
and each blob is linked (or copied) to a temporary name in our models folder and hashed *there*:
what is renamed into place is what was verified, whatever happens to Ollama's file meanwhile.
A folder import registers the GGUF files where they are, after reading each header; so does an LM
Studio import, of the files ``list_lmstudio`` finds (and only those), each with its folder's projector.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from agent.admission import inspect_file
from agent.api.sources import (
    FolderImportRequest,
    ImportedModel,
    LmStudioImportRequest,
    LmStudioModelInfo,
    OllamaImportRequest,
    OllamaModelInfo,
)
from agent.problems import AgentProblem, InvalidModelFile
from agent.sources.fetch import ChecksumMismatch, partial_path
from agent.sources.huggingface import BadSourceRequest
from agent.sources.store import ModelStore, link_or_copy, slug
from agent.sources.transfers import TransferHandle
from core.hashing import file_sha256
from core.safe_names import (
    UnsafeName,
    check_component,
    check_digest,
    check_node_path,
)

MODEL_MEDIA = "application/vnd.ollama.image.model"
PROJECTOR_MEDIA = "application/vnd.ollama.image.projector"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MAX_MANIFEST = 1 << 20
MAX_LISTED = 2000
MAX_FOLDER_FILES = 500
_PART_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


class OllamaProblem(AgentProblem, status=422, code="invalid_ollama_model"):
    pass


def default_store() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


def parse_ref(model: str) -> tuple[str, str, str, str]:
    """``[host/][namespace/]name[:tag]`` as (host, namespace, name, tag), each part checked."""
    name, _, tag = model.partition(":")
    tag = tag or DEFAULT_TAG
    parts = name.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    if len(parts) != 3 or _TAG_RE.fullmatch(tag) is None \
            or not all(_PART_RE.fullmatch(p) and ".." not in p for p in parts):
        raise OllamaProblem(f"{model[:120]!r} is not an Ollama model name like llama3.2:3b")
    for part in (*parts, tag):
        try:
            check_component(part, "model name")
        except UnsafeName as exc:
            raise OllamaProblem(str(exc)) from exc
    return parts[0], parts[1], parts[2], tag


def _store_paths(store: Path) -> tuple[Path, Path]:
    return store / "manifests", store / "blobs"


def _read_manifest(path: Path) -> list[dict[str, Any]]:
    if path.is_symlink() or not path.is_file():
        raise OllamaProblem(f"no such Ollama model ({path.name})", status=404, code="not_found")
    with open(path, "rb") as fh:
        raw = fh.read(MAX_MANIFEST + 1)
    if len(raw) > MAX_MANIFEST:
        raise OllamaProblem("the manifest is larger than 1 MiB")
    try:
        layers = json.loads(raw)["layers"]
        if not isinstance(layers, list) or not all(
                isinstance(layer, dict) and isinstance(layer.get("mediaType"), str)
                and isinstance(layer.get("digest"), str) and isinstance(layer.get("size"), int)
                for layer in layers):
            raise TypeError("layers")
    except (ValueError, KeyError, TypeError) as exc:
        raise OllamaProblem(f"the manifest is malformed: {exc}") from exc
    return layers


def list_models(store: Path | None = None) -> list[OllamaModelInfo]:
    """The models of an Ollama store (blocking)."""
    manifests, _ = _store_paths(store or default_store())
    found: list[OllamaModelInfo] = []
    for path in sorted(manifests.glob("*/*/*/*"))[:MAX_LISTED]:
        host, namespace, name, tag = path.relative_to(manifests).parts
        try:
            parse_ref(f"{host}/{namespace}/{name}:{tag}")
            layers = _read_manifest(path)
        except OllamaProblem:
            continue
        ref = f"{name}:{tag}" if (host, namespace) == (DEFAULT_HOST, DEFAULT_NAMESPACE) else \
            f"{host}/{namespace}/{name}:{tag}"
        if any(layer["mediaType"] == MODEL_MEDIA for layer in layers):
            found.append(OllamaModelInfo(model=ref, size=sum(layer["size"] for layer in layers),
                                         has_projector=any(la["mediaType"] == PROJECTOR_MEDIA for la in layers)))
    return found


def _blob(blobs: Path, layer: dict[str, Any]) -> tuple[Path, str]:
    """The blob of a layer: the digest checked first, then the path built, then the file checked."""
    try:
        digest = check_digest(layer["digest"], "blob digest")
    except UnsafeName as exc:
        raise OllamaProblem(str(exc)) from exc
    hex_digest = digest[7:]
    path = blobs / f"sha256-{hex_digest}"
    if path.is_symlink() or not path.is_file():
        raise OllamaProblem(f"blob sha256-{hex_digest[:12]}… is missing from the Ollama store",
                            status=404, code="not_found")
    if path.stat().st_size != layer["size"]:
        raise ChecksumMismatch(f"blob sha256-{hex_digest[:12]}… has the wrong size")
    return path, hex_digest


async def _place(blob: Path, hex_digest: str, dest: Path, copy: bool, handle: TransferHandle, base: int) -> str:
    """Link or copy ``blob`` beside ``dest``, verify the copy we hold, then rename it into place."""
    tmp = partial_path(dest)
    loop = asyncio.get_running_loop()
    try:
        how = await asyncio.to_thread(link_or_copy, blob, tmp, copy)
        def on_bytes(n: int) -> None:
            loop.call_soon_threadsafe(handle.progress, base + n)

        got = await asyncio.to_thread(file_sha256, tmp, on_bytes=on_bytes)
        if got != hex_digest:
            raise ChecksumMismatch(f"{blob.name} does not match its digest (got sha256:{got[:12]}…)")
        os.replace(tmp, dest)
        return how
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_ollama(req: OllamaImportRequest, store: ModelStore) -> str:
    _host, _ns, name, tag = parse_ref(req.model)
    if req.store is not None:
        try:
            check_node_path(req.store, "store")
        except UnsafeName as exc:
            raise OllamaProblem(str(exc)) from exc
    store.target(req.target or f"ollama-{slug(name, 24)}-{slug(tag, 12)}", "model.gguf")
    return f"Ollama {req.model}"


async def run_ollama(req: OllamaImportRequest, handle: TransferHandle, store: ModelStore) -> list[ImportedModel]:
    host, namespace, name, tag = parse_ref(req.model)
    manifests, blobs = _store_paths(Path(req.store) if req.store else default_store())
    handle.stage("reading manifest")
    layers = await asyncio.to_thread(_read_manifest, manifests / host / namespace / name / tag)
    models = [la for la in layers if la["mediaType"] == MODEL_MEDIA]
    projectors = [la for la in layers if la["mediaType"] == PROJECTOR_MEDIA]
    if len(models) != 1 or len(projectors) > 1:
        raise OllamaProblem(f"{req.model} has {len(models)} model layers and {len(projectors)} projectors")
    wanted = [(layer, *_blob(blobs, layer)) for layer in models + projectors]
    folder = req.target or f"ollama-{slug(name, 24)}-{slug(tag, 12)}"
    handle.stage("verifying blobs", total=sum(layer["size"] for layer, *_ in wanted),
                 files=["model.gguf"] + (["mmproj.gguf"] if projectors else []))
    placed: list[Path] = []
    base = 0
    try:
        for (layer, blob, hex_digest), file_name in zip(wanted, ("model.gguf", "mmproj.gguf"), strict=False):
            dest = store.prepare(store.target(folder, file_name))
            await _place(blob, hex_digest, dest, req.copy_files, handle, base)
            placed.append(dest)
            base += layer["size"]
        summary = await asyncio.to_thread(inspect_file, str(placed[0]))
        if summary.is_projector:
            raise InvalidModelFile("the model layer is a vision projector")
    except BaseException:
        for path in placed:
            path.unlink(missing_ok=True)
        raise
    return [ImportedModel(name=slug(f"{name}-{tag}"), model_path=str(placed[0]),
                          projector_path=str(placed[1]) if len(placed) > 1 else None,
                          size=models[0]["size"], sha256=wanted[0][2], origin=f"ollama:{req.model}")]


def lmstudio_folders() -> list[Path]:
    """LM Studio's models folders: the current one and the older one under ~/.cache."""
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def _is_later_shard(name: str) -> bool:
    return re.search(r"-0000[2-9]-of-|-000[1-9]\d-of-", name) is not None


def list_lmstudio(folders: list[Path] | None = None) -> list[LmStudioModelInfo]:
    """The GGUF models under LM Studio's ``publisher/model/`` folders (blocking; names only, no
    header is read: a file named ``mmproj*`` is the folder's vision projector)."""
    found: list[LmStudioModelInfo] = []
    seen: set[str] = set()
    for root in folders if folders is not None else lmstudio_folders():
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.glob("*/*") if p.is_dir() and not p.is_symlink()):
            ggufs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
            projectors = [p for p in ggufs if p.name.lower().startswith("mmproj")]
            projector = str(projectors[0]) if len(projectors) == 1 else None
            for path in ggufs:
                real = str(path.resolve())
                if path in projectors or _is_later_shard(path.name) or real in seen:
                    continue
                seen.add(real)
                found.append(LmStudioModelInfo(model=str(path.relative_to(root)).replace(os.sep, "/"),
                                               path=str(path), size=path.stat().st_size,
                                               projector_path=projector))
                if len(found) >= MAX_LISTED:
                    return found
    return found


def lmstudio_roots(defaults: list[Path] | None, folder: str | None) -> list[Path]:
    """The folders an LM Studio listing or import looks in: LM Studio's own (or ``defaults``), plus
    ``folder``, a models folder of the same layout the user picked."""
    roots = list(defaults if defaults is not None else lmstudio_folders())
    if folder:
        try:
            check_node_path(folder, "folder")
        except UnsafeName as exc:
            raise BadSourceRequest(str(exc)) from exc
        if not os.path.isdir(folder):
            raise BadSourceRequest(f"{folder} is not a folder on this node", status=404, code="not_found")
        roots.append(Path(folder))
    return roots


def check_lmstudio(req: LmStudioImportRequest, roots: list[Path]) -> tuple[str, list[LmStudioModelInfo]]:
    """The listed models the request names (blocking): a path LM Studio's listing does not show is refused,
    so an import registers nothing but a model of those folders, with its own projector."""
    listed = {info.path: info for info in list_lmstudio(roots)}
    unknown = [p for p in req.paths if p not in listed]
    if unknown:
        raise BadSourceRequest(f"{unknown[0]} is not a model in LM Studio's folders on this node",
                               status=404, code="not_found")
    picked = [listed[p] for p in dict.fromkeys(req.paths)]
    more = f" and {len(picked) - 1} more" if len(picked) > 1 else ""
    return f"LM Studio {picked[0].model}{more}", picked


def _read_lmstudio(picked: list[LmStudioModelInfo]) -> list[ImportedModel]:
    found: list[ImportedModel] = []
    for info in picked:
        summary = inspect_file(info.path)  # a file that is no GGUF model fails the import, saying which
        if summary.is_projector:
            raise InvalidModelFile(f"{info.model} is a vision projector, not a model")
        found.append(ImportedModel(name=slug(Path(info.path).stem), model_path=info.path,
                                   projector_path=info.projector_path, size=summary.file_size,
                                   origin=f"LM Studio: {info.model}"))
    return found


async def run_lmstudio(picked: list[LmStudioModelInfo], handle: TransferHandle) -> list[ImportedModel]:
    handle.stage("reading headers")
    found = await asyncio.to_thread(_read_lmstudio, picked)
    handle.stage("done", files=[Path(m.model_path).name for m in found])
    return found


def check_folder(req: FolderImportRequest) -> str:
    try:
        check_node_path(req.folder, "folder")
    except UnsafeName as exc:
        raise BadSourceRequest(str(exc)) from exc
    if not os.path.isdir(req.folder):
        raise BadSourceRequest(f"{req.folder} is not a folder on this node", status=404, code="not_found")
    return f"folder {req.folder}"


def _scan_folder(folder: Path) -> tuple[list[ImportedModel], list[str]]:
    ggufs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())[:MAX_FOLDER_FILES]
    models: list[tuple[Path, int]] = []
    projectors: list[Path] = []
    problems: list[str] = []
    for path in ggufs:
        if _is_later_shard(path.name):
            continue  # later shards of a split model load with the first
        try:
            summary = inspect_file(str(path))
        except InvalidModelFile as exc:
            problems.append(exc.message)
            continue
        (projectors.append(path) if summary.is_projector else models.append((path, summary.file_size)))
    projector = str(projectors[0]) if len(projectors) == 1 else None
    return [ImportedModel(name=slug(p.stem), model_path=str(p), projector_path=projector, size=size,
                          origin=f"folder:{folder}") for p, size in models], problems


async def run_folder(req: FolderImportRequest, handle: TransferHandle) -> list[ImportedModel]:
    handle.stage("reading headers")
    found, problems = await asyncio.to_thread(_scan_folder, Path(req.folder))
    if not found:
        raise InvalidModelFile("no usable GGUF model in the folder" + (f": {problems[0]}" if problems else ""))
    handle.stage("done", files=[Path(m.model_path).name for m in found])
    return found
