"""The Hugging Face hub's catalog API, asked by the daemon itself: search, and one repository's files.

Two calls of the hub's public API, as ``huggingface_hub`` makes them (``HfApi.list_models`` and
``HfApi.model_info(files_metadata=True)``), made here with aiohttp so that they never block the event
loop and each has a timeout (the hub client retries for most of a minute, with no total timeout):

    GET {hub}/api/models?search=Q&filter=gguf&sort=downloads&limit=N&expand=downloads&expand=likes...
    GET {hub}/api/models/{owner}/{name}?blobs=true       -> siblings with their sizes
    GET {hub}/api/models/{owner}/{name}/revision/{rev}?blobs=true -> its commit (sha), each file's sha256

``HF_ENDPOINT`` is read on each call (a mirror, or a test's fake hub), and ``HF_TOKEN``, when set, is
sent to the hub (a private repository's files). Downloads stay the agent's (``/api/downloads``): a
node fetches the files with its own network and token. Every failure is a ``DaemonProblem`` that
says what to do: the hub unreachable (502 ``hub_unreachable``), too slow (504 ``hub_timeout``), a
gated repository (403 ``repo_gated``), a missing or private one (404 ``repo_not_found``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NoReturn
from urllib.parse import quote

import aiohttp

from agent.api.sources import SourceFile
from core.safe_names import UnsafeName, check_hf_repo
from daemon.api.hub import HubFile, HubFormat, HubRepo, HubRepoFiles, HubSearchResult
from daemon.errors import DaemonProblem
from daemon.sources.quants import group_ggufs

_LOGGER = logging.getLogger(__name__)

DEFAULT_HUB = "https://huggingface.co"
TIMEOUT_S = 20.0
_EXPAND = ("downloads", "likes", "lastModified", "gated", "pipeline_tag")


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_HUB).rstrip("/")


def hub_token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def _gated(value: object) -> bool:
    return value not in (None, False, "false", "")


def _repo(item: dict[str, Any]) -> HubRepo:
    return HubRepo(id=str(item.get("id") or item.get("modelId") or ""), downloads=int(item.get("downloads") or 0),
                   likes=int(item.get("likes") or 0), updated=item.get("lastModified"),
                   gated=_gated(item.get("gated")), pipeline_tag=item.get("pipeline_tag"))


class Hub:
    """The hub's search and file listing, each call on a session of its own (they are rare)."""

    def __init__(self, endpoint: Callable[[], str] = hub_endpoint, token: Callable[[], str | None] = hub_token,
                 timeout_s: float = TIMEOUT_S) -> None:
        self._endpoint = endpoint
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(5.0, timeout_s))

    async def search(self, query: str, fmt: HubFormat = "gguf", limit: int = 20) -> HubSearchResult:
        params: list[tuple[str, str]] = [("search", query), ("filter", fmt), ("sort", "downloads"),
                                         ("limit", str(limit)), *(("expand", e) for e in _EXPAND)]
        answer = await self._get("/api/models", params, subject=None)
        repos = [_repo(item) for item in answer if isinstance(item, dict)][:limit]
        message = None
        if not repos:
            message = (f"no {fmt.upper()} repository on the hub matches '{query}': try fewer or other words "
                       "(a family such as 'qwen3' or 'gemma 3'), or another format")
        return HubSearchResult(query=query, format=fmt, repos=repos, message=message)

    async def repo_files(self, repo: str) -> HubRepoFiles:
        try:
            check_hf_repo(repo)
        except UnsafeName as exc:
            raise DaemonProblem(422, "invalid_request", str(exc)) from exc
        info = await self._get(f"/api/models/{repo}", [("blobs", "true")], subject=repo)
        if not isinstance(info, dict):
            raise DaemonProblem(502, "hub_error", f"the hub's answer about {repo} is not a repository")
        siblings = info.get("siblings") or []
        files = [HubFile(path=str(s["rfilename"]), size=int(s.get("size") or (s.get("lfs") or {}).get("size") or 0))
                 for s in siblings if isinstance(s, dict) and s.get("rfilename")]
        quants, projectors = group_ggufs(files)
        if not quants:
            kinds = sorted({f.path.rsplit(".", 1)[-1].lower() for f in files if "." in f.path})
            raise DaemonProblem(404, "no_gguf_files", (
                f"{repo} holds no GGUF model ({len(files)} files: {', '.join(kinds[:6]) or 'none'}). "
                "llama.cpp runs GGUF files: search for a GGUF version of it "
                f"(`mirbadllm ctl models search {repo.split('/')[1]}`)."))
        about = _repo(info)
        note = None
        if about.gated:
            note = (f"{repo} is gated: accept its license at {self._endpoint()}/{repo}, then give the node that "
                    "downloads it a token (HF_TOKEN in its environment)")
        return HubRepoFiles(repo=repo, downloads=about.downloads, likes=about.likes, updated=about.updated,
                            gated=about.gated, quants=quants, projectors=projectors, note=note)

    async def files_at(self, repo: str, revision: str = "main") -> tuple[str, dict[str, SourceFile]]:
        """The commit ``revision`` names in ``repo`` and its files, each with its SHA-256 (LFS) and size
        (model updates, ``daemon.sources.updates``)."""
        info = await self._get(f"/api/models/{repo}/revision/{quote(revision, safe='')}", [("blobs", "true")],
                               subject=repo)
        sha = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(sha, str) or not sha:
            raise DaemonProblem(502, "hub_error", f"the hub's answer about {repo}@{revision} names no commit")
        files: dict[str, SourceFile] = {}
        for s in info.get("siblings") or []:
            if isinstance(s, dict) and s.get("rfilename"):
                lfs = s.get("lfs") or {}
                files[str(s["rfilename"])] = SourceFile(path=str(s["rfilename"]), sha256=lfs.get("sha256") or None,
                                                        size=int(lfs.get("size") or s.get("size") or 0))
        return sha, files

    async def _get(self, path: str, params: list[tuple[str, str]], subject: str | None) -> Any:
        hub = self._endpoint()
        token = self._token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session, \
                    session.get(hub + path, params=params, headers=headers) as resp:
                if resp.status >= 400:
                    _refused(resp.status, resp.headers.get("X-Error-Code", ""), hub, subject)
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, OSError) as exc:
            raise DaemonProblem(502, "hub_unreachable", (
                f"cannot reach the Hugging Face hub at {hub}: {exc or type(exc).__name__}. Check this machine's "
                "internet connection (or HF_ENDPOINT, when it points at a mirror)")) from exc
        except TimeoutError as exc:
            raise DaemonProblem(504, "hub_timeout", f"the Hugging Face hub at {hub} did not answer within "
                                f"{self._timeout.total:.0f} s; try again in a moment") from exc
        except ValueError as exc:
            raise DaemonProblem(502, "hub_error", f"the hub at {hub} answered something that is not JSON") from exc


def _refused(answered: int, error_code: str, hub: str, subject: str | None) -> NoReturn:
    what = subject or "the search"
    if subject and (answered == 404 or (answered == 401 and error_code == "RepoNotFound")):
        raise DaemonProblem(404, "repo_not_found", f"no repository {subject} on the hub, or it is private "
                             "(a private one needs HF_TOKEN of an account that may see it)")
    if subject and answered in (401, 403):
        raise DaemonProblem(403, "repo_gated", (
            f"{subject} is gated or private: the hub answered {answered}. Accept its license at {hub}/{subject} "
            "and give this machine a token (HF_TOKEN)"))
    if answered == 429:
        raise DaemonProblem(429, "hub_rate_limited", "the hub asks to slow down (429); try again in a minute")
    raise DaemonProblem(502, "hub_error", f"the hub answered {answered} to {what}; try again later")
