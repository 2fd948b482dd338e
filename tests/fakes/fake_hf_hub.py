"""A fake Hugging Face hub and its CDN: enough of the protocol for ``huggingface_hub`` and our fetch.

The hub answers ``HEAD/GET /{repo}/resolve/{revision}/{path}``: an LFS file is a 302 to the CDN
with ``X-Linked-Etag`` (its SHA-256), ``X-Linked-Size`` and ``X-Repo-Commit``, as the real hub
does; a small file is served directly with its git SHA-1 as ``ETag``. ``GET /api/models/{repo}/
tree/{revision}`` lists the files; ``GET /api/models?search=&filter=&sort=downloads&limit=`` searches
(``HfApi.list_models``: a repo matches when its id holds the words, its tags hold the filter) and
``GET /api/models/{repo}?blobs=true`` describes one with its files' sizes (``HfApi.model_info``);
``publish`` makes a new commit (new files or new bytes for old names; ``GET /api/models/{repo}/revision/{rev}``
and ``resolve/{rev}`` answer each commit's own files, ``main`` the newest), while ``add`` changes
a file in place without a new commit (what the hub must never do); ``describe`` sets a repo's downloads, likes, date, tags and ``gated``, ``private`` repos answer 401
``RepoNotFound`` and ``refuse`` makes a repo answer 403 ``GatedRepo``, as the real hub does. The CDN is a second server on another origin (``localhost``
rather than ``127.0.0.1``): it serves ``Range`` requests and records every request's headers,
so a test sees whether a token leaked there. Per-file switches make it lie or fail:

    serve=bytes        send these bytes instead (their hash differs from the advertised one)
    etag="..."         advertise this ETag instead of the real digest
    cut_at=N           close the connection after N bytes (``cut_times`` times, then behave)
    chunk_delay=S      pause between 64 KiB chunks (a slow download, for cancel tests)
    location="..."     redirect here instead of the CDN
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
from dataclasses import dataclass, field, replace

from aiohttp import web

_LOGGER = logging.getLogger(__name__)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHUNK = 64 * 1024


@dataclass
class HubFile:
    data: bytes
    lfs: bool = True
    serve: bytes | None = None
    etag: str | None = None
    cut_at: int | None = None
    cut_times: int = 1
    chunk_delay: float = 0.0
    location: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def git_sha1(self) -> str:
        return hashlib.sha1(f"blob {len(self.data)}\0".encode() + self.data).hexdigest()


@dataclass
class Seen:
    server: str
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeHub:
    repos: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    token: str | None = None  # when set, the hub answers 401 without it
    auth_realm: str | None = None  # a 401 carries WWW-Authenticate with this realm
    hub_url: str = ""
    cdn_url: str = ""
    about: dict[str, dict[str, object]] = field(default_factory=dict)  # repo -> downloads, likes, tags...
    private: set[str] = field(default_factory=set)  # 401 RepoNotFound without the token, as the hub says it
    refused: set[str] = field(default_factory=set)  # 403 GatedRepo: a gated repo whose license is not accepted
    commits: dict[str, str] = field(default_factory=dict)  # repo -> its newest commit (COMMIT until a publish)
    history: dict[str, dict[str, dict[str, HubFile]]] = field(default_factory=dict)  # repo -> commit -> files
    _runners: list[web.AppRunner] = field(default_factory=list)
    _serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def add(self, repo: str, path: str, data: bytes, **switches: object) -> HubFile:
        item = HubFile(data, **switches)  # type: ignore[arg-type]
        self.repos.setdefault(repo, {})[path] = item
        return item

    def publish(self, repo: str, files: dict[str, bytes], **switches: object) -> str:
        """A new commit of ``repo`` with these files' new bytes (the others as they were): its sha."""
        old = self.commit_of(repo)
        self.history.setdefault(repo, {})[old] = {p: replace(f) for p, f in self.repos.get(repo, {}).items()}
        for path, data in files.items():
            self.add(repo, path, data, **switches)
        self.commits[repo] = hashlib.sha1(f"{repo}:{next(self._serial)}".encode()).hexdigest()
        return self.commits[repo]

    def commit_of(self, repo: str) -> str:
        return self.commits.get(repo, COMMIT)

    def _at(self, repo: str, revision: str) -> tuple[str, dict[str, HubFile]]:
        """The commit ``revision`` names and its files: an older commit's own, else the newest."""
        older = self.history.get(repo, {})
        if revision in older and revision != self.commit_of(repo):
            return revision, older[revision]
        return self.commit_of(repo), self.repos.get(repo, {})

    def describe(self, repo: str, *, downloads: int = 0, likes: int = 0, updated: str = "2025-05-01T12:00:00.000Z",
                 tags: tuple[str, ...] = (), gated: bool | str = False) -> None:
        """The repo's figures in a search and its description (its files are added with ``add``)."""
        self.repos.setdefault(repo, {})
        self.about[repo] = {"downloads": downloads, "likes": likes, "lastModified": updated, "tags": list(tags),
                            "gated": gated}

    def requests(self, server: str, method: str | None = None) -> list[Seen]:
        return [s for s in self.seen if s.server == server and (method is None or s.method == method)]

    # --- the hub -------------------------------------------------------------------------------
    def _record(self, server: str, request: web.Request) -> None:
        self.seen.append(Seen(server, request.method, request.path, dict(request.headers)))

    def _denied(self, request: web.Request) -> web.Response | None:
        if self.token is None or request.headers.get("Authorization") == f"Bearer {self.token}":
            return None
        headers = {"WWW-Authenticate": f'Bearer realm="{self.auth_realm}"'} if self.auth_realm else {}
        return web.json_response({"error": "Invalid credentials"}, status=401, headers=headers)

    async def resolve(self, request: web.Request) -> web.StreamResponse:
        self._record("hub", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        repo = f"{request.match_info['owner']}/{request.match_info['name']}"
        if repo in self.private or repo in self.refused:
            private = repo in self.private
            return web.json_response({"error": "Repository not found" if private else "Access restricted"},
                                     status=401 if private else 403,
                                     headers={"X-Error-Code": "RepoNotFound" if private else "GatedRepo"})
        commit, files = self._at(repo, request.match_info["revision"])
        item = files.get(request.match_info["path"])
        if item is None:
            return web.json_response({"error": "Entry not found"}, status=404,
                                     headers={"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": commit}
        if not item.lfs:
            headers["ETag"] = f'"{item.etag or item.git_sha1}"'
            return await self._send(request, item, headers)
        etag = item.etag if item.etag is not None else item.sha256
        headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(item.data)),
                        "ETag": f'"{etag}"', "Content-Length": "0",
                        "Location": item.location or f"{self.cdn_url}/cdn/{repo}/{request.match_info['path']}"
                        + ("" if commit == self.commit_of(repo) else f"?rev={commit}")})
        return web.Response(status=302, headers=headers)

    async def tree(self, request: web.Request) -> web.Response:
        self._record("hub", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        repo = f"{request.match_info['owner']}/{request.match_info['name']}"
        if repo not in self.repos:
            return web.json_response({"error": "Repository not found"}, status=404,
                                     headers={"X-Error-Code": "RepoNotFound"})
        _commit, at = self._at(repo, request.match_info["revision"])
        files = [{"type": "file", "path": path, "size": len(item.data), "oid": item.git_sha1,
                  **({"lfs": {"oid": item.sha256, "size": len(item.data), "pointerSize": 134}} if item.lfs else {})}
                 for path, item in at.items()]
        return web.json_response(files)

    def _tags(self, repo: str) -> list[str]:
        tags = [str(t) for t in self.about.get(repo, {}).get("tags", [])]  # type: ignore[attr-defined]
        kinds = {p.rsplit(".", 1)[-1].lower() for p in self.repos.get(repo, {})}
        return tags + [k for k in ("gguf", "safetensors") if k in kinds and k not in tags]

    def _summary(self, repo: str, fields: list[str] | None) -> dict[str, object]:
        about = {"downloads": 0, "likes": 0, "lastModified": "2025-01-01T00:00:00.000Z", "gated": False,
                 "pipeline_tag": "text-generation", **self.about.get(repo, {}), "tags": self._tags(repo)}
        shown = {k: v for k, v in about.items() if not fields or k in fields}
        return {"_id": hashlib.sha1(repo.encode()).hexdigest()[:24], "id": repo, "modelId": repo, **shown}

    async def search(self, request: web.Request) -> web.Response:
        self._record("hub", request)
        words = request.query.get("search", "").lower().split()
        wanted = request.query.getall("filter", [])
        found = [r for r in self.repos if r not in self.private and all(w in r.lower() for w in words)
                 and all(f in self._tags(r) for f in wanted)]
        if request.query.get("sort") == "downloads":
            found.sort(key=lambda r: -int(self.about.get(r, {}).get("downloads", 0)))  # type: ignore[call-overload]
        limit = int(request.query.get("limit", "1000"))
        return web.json_response([self._summary(r, request.query.getall("expand", [])) for r in found[:limit]])

    async def model_info(self, request: web.Request) -> web.Response:
        self._record("hub", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        repo = f"{request.match_info['owner']}/{request.match_info['name']}"
        if repo not in self.repos or repo in self.private:
            return web.json_response({"error": "Repository not found"}, status=401 if repo in self.private else 404,
                                     headers={"X-Error-Code": "RepoNotFound"})
        if repo in self.refused:
            return web.json_response({"error": f"Access to model {repo} is restricted."}, status=403,
                                     headers={"X-Error-Code": "GatedRepo"})
        blobs = request.query.get("blobs") in ("true", "True", "1")
        commit, at = self._at(repo, request.match_info.get("revision", "main"))
        siblings = [{"rfilename": path, **({"blobId": item.git_sha1, "size": len(item.data)} if blobs else {}),
                     **({"lfs": {"sha256": item.sha256, "size": len(item.data), "pointerSize": 134}}
                        if blobs and item.lfs else {})}
                    for path, item in at.items()]
        return web.json_response({**self._summary(repo, None), "sha": commit, "siblings": siblings})

    # --- the CDN -------------------------------------------------------------------------------
    async def cdn(self, request: web.Request) -> web.StreamResponse:
        self._record("cdn", request)
        repo = f"{request.match_info['owner']}/{request.match_info['name']}"
        item = self._at(repo, request.query.get("rev", "main"))[1].get(request.match_info["path"])
        if item is None:
            return web.Response(status=404)
        return await self._send(request, item, {"ETag": f'"{item.sha256}"'})

    async def _send(self, request: web.Request, item: HubFile, headers: dict[str, str]) -> web.StreamResponse:
        body = item.serve if item.serve is not None else item.data
        start, status = 0, 200
        wanted = request.headers.get("Range", "")
        if wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            start = int(first)
            end = int(last) + 1 if last else len(body)
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(body)}"
            body, status = body[start:end], 206
        headers["Accept-Ranges"] = "bytes"
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = len(body)
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        cut = item.cut_at - start if item.cut_at is not None and item.cut_times > 0 and item.cut_at > start else None
        for offset in range(0, len(body), CHUNK):
            piece = body[offset:offset + CHUNK]
            if cut is not None and offset + len(piece) > cut:
                await response.write(piece[: max(0, cut - offset)])
                item.cut_times -= 1
                assert request.transport is not None
                request.transport.close()  # the connection drops mid-body
                return response
            await response.write(piece)
            if item.chunk_delay:
                await asyncio.sleep(item.chunk_delay)
        await response.write_eof()
        return response

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> FakeHub:
        hub = web.Application()
        hub.router.add_route("*", "/{owner}/{name}/resolve/{revision}/{path:.+}", self.resolve)
        hub.router.add_get("/api/models", self.search)
        hub.router.add_get("/api/models/{owner}/{name}", self.model_info)
        hub.router.add_get("/api/models/{owner}/{name}/revision/{revision}", self.model_info)
        hub.router.add_get("/api/models/{owner}/{name}/tree/{revision}", self.tree)
        hub.router.add_get("/api/models/{owner}/{name}/tree/{revision}/{sub:.*}", self.tree)
        cdn = web.Application()
        cdn.router.add_get("/cdn/{owner}/{name}/{path:.+}", self.cdn)
        ports = []
        for app in (hub, cdn):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self._runners.append(runner)
            ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        self.hub_url = f"http://127.0.0.1:{ports[0]}"
        self.cdn_url = f"http://localhost:{ports[1]}"  # another origin, as the real CDN is
        return self

    async def close(self) -> None:
        while self._runners:
            await self._runners.pop().cleanup()
