"""The agent's side of the checked mirror: receive a model version's files from the daemon, verify, then place.

The contract and its routes are ``agent.api.mirror``. Every name is checked with
``core.safe_names`` and every path built from it must stay inside the models folder (no
component may be a link out of it, the file itself no link at all) before anything is read or
written. A file is written to ``.{file}.mirror`` beside its place, chunk by chunk as it arrives
(each chunk flushed, so a cut transfer leaves every byte received for the next push to continue
from), hashed once it has all its bytes, and renamed into place only by a commit of the whole
version. One push per file at a time (409 ``mirror_busy``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web
from pydantic import ValidationError

from agent.api.mirror import (
    MIRROR_PATH,
    MirrorCommit,
    MirrorCommitAnswer,
    MirrorFile,
    MirrorFileState,
)
from agent.problems import AgentProblem
from core.hashing import file_sha256
from core.safe_names import UnsafeName, check_relative_name, link_out_of, real_inside

CHUNK = 1 << 20
PARTIAL_SUFFIX = ".mirror"


class MirrorRefused(AgentProblem, status=422, code="mirror_refused"):
    pass


class MirrorReceiver:
    """Files pushed into ``root`` (the agent's models folder), placed a whole version at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._busy: set[str] = set()
        self._verified: dict[str, tuple[int, int, str]] = {}  # name -> (size, mtime_ns, sha256) of its partial

    # --- paths --------------------------------------------------------------------------------
    def place(self, name: str) -> Path:
        """``models/{name}``, checked: a safe relative name, no link out of the folder on the way."""
        try:
            check_relative_name(name, "mirror file name")
        except UnsafeName as exc:
            raise MirrorRefused(str(exc), code="unsafe_name") from exc
        path = self.root / name
        if link_out_of(self.root, path) is not None:
            raise MirrorRefused(f"{name} leads out of the models folder", code="unsafe_name")
        if path.is_symlink():
            raise MirrorRefused(f"{name} is a link; refusing to write through it", code="unsafe_name")
        return path

    @staticmethod
    def partial(path: Path) -> Path:
        return path.with_name(f".{path.name}{PARTIAL_SUFFIX}")

    # --- the routes' work ---------------------------------------------------------------------
    async def state(self, name: str) -> MirrorFileState:
        path = self.place(name)
        part = self.partial(path)
        for candidate, complete in ((part, False), (path, True)):
            if candidate.is_file():
                sha = await asyncio.to_thread(file_sha256, candidate)
                return MirrorFileState(name=name, size=candidate.stat().st_size, sha256=sha, complete=complete)
        return MirrorFileState(name=name)

    async def receive(self, file: MirrorFile, offset: int,
                      chunks: Callable[[], AsyncIterator[bytes]]) -> MirrorFileState:
        path = self.place(file.name)
        if file.name in self._busy:
            raise MirrorRefused(f"{file.name} is being received already", status=409, code="mirror_busy")
        self._busy.add(file.name)
        try:
            return await self._receive(path, file, offset, chunks)
        finally:
            self._busy.discard(file.name)

    async def _receive(self, path: Path, file: MirrorFile, offset: int,
                       chunks: Callable[[], AsyncIterator[bytes]]) -> MirrorFileState:
        if path.exists():
            raise MirrorRefused(f"{file.name} is in place already; nothing was changed", status=409,
                                code="mirror_target_exists")
        part = self.partial(path)
        have = part.stat().st_size if part.is_file() else 0
        if offset != 0 and offset != have:
            raise MirrorRefused(f"{file.name}: this node has {have} bytes of it, not {offset}", status=409,
                                code="mirror_offset_mismatch", details={"size": have})
        if offset > file.size:
            raise MirrorRefused(f"{file.name}: offset {offset} is past its size {file.size}")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not real_inside(self.root, path.parent / "x"):
            raise MirrorRefused(f"{file.name} leads out of the models folder", code="unsafe_name")
        self._verified.pop(file.name, None)
        size = offset
        # Written as it arrives, and flushed: a cut leaves every byte received for the next push.
        with part.open("r+b" if offset else "wb") as fh:
            fh.seek(offset)
            fh.truncate()
            async for chunk in chunks():
                size += len(chunk)
                if size > file.size:
                    fh.close()
                    part.unlink(missing_ok=True)
                    raise MirrorRefused(f"{file.name}: more than the {file.size} bytes stated; nothing was kept")
                fh.write(chunk)
                fh.flush()
        if size < file.size:
            return MirrorFileState(name=file.name, size=size, sha256=await asyncio.to_thread(file_sha256, part))
        sha = await asyncio.to_thread(file_sha256, part)
        if sha != file.sha256:
            part.unlink(missing_ok=True)
            raise MirrorRefused(f"checksum check failed: {file.name}'s SHA-256 is {sha}, the daemon stated "
                                f"{file.sha256}; nothing was kept", code="mirror_checksum_mismatch")
        self._verified[file.name] = (size, part.stat().st_mtime_ns, sha)
        return MirrorFileState(name=file.name, size=size, sha256=sha)

    async def _checked(self, file: MirrorFile) -> tuple[Path, Path | None]:
        """The file's place and its partial to rename (None: the same bytes are in place already)."""
        path = self.place(file.name)
        if path.is_file():
            sha = await asyncio.to_thread(file_sha256, path)
            if sha == file.sha256 and path.stat().st_size == file.size:
                return path, None
            raise MirrorRefused(f"{file.name} is in place with other bytes; nothing was changed", status=409,
                                code="mirror_target_exists")
        part = self.partial(path)
        if not part.is_file() or part.stat().st_size != file.size:
            raise MirrorRefused(f"{file.name} has not been received whole; nothing was placed", status=409,
                                code="mirror_incomplete")
        stat = part.stat()
        if self._verified.get(file.name) != (stat.st_size, stat.st_mtime_ns, file.sha256):
            sha = await asyncio.to_thread(file_sha256, part)
            if sha != file.sha256:
                part.unlink(missing_ok=True)
                raise MirrorRefused(f"checksum check failed: {file.name}'s SHA-256 is {sha}, the daemon stated "
                                    f"{file.sha256}; nothing was placed", code="mirror_checksum_mismatch")
        return path, part

    async def commit(self, commit: MirrorCommit) -> MirrorCommitAnswer:
        names = [f.name for f in commit.files]
        if len(set(names)) != len(names) or self._busy & set(names):
            raise MirrorRefused("a commit names each file once, none still being received", status=409,
                                code="mirror_busy")
        checked = [await self._checked(f) for f in commit.files]  # all verified before any is placed
        placed: list[Path] = []
        try:
            for path, part in checked:
                if part is not None:
                    os.replace(part, path)
                    placed.append(path)
        except OSError as exc:
            for path in placed:  # whole or nothing: what this commit placed goes again
                path.unlink(missing_ok=True)
            raise MirrorRefused(f"could not place the version: {exc}", status=500, code="mirror_failed") from exc
        for name in names:
            self._verified.pop(name, None)
        return MirrorCommitAnswer(paths=[str(path) for path, _ in checked])

    async def discard(self, name: str) -> MirrorFileState:
        path = self.place(name)
        if name in self._busy:
            raise MirrorRefused(f"{name} is being received", status=409, code="mirror_busy")
        self.partial(path).unlink(missing_ok=True)
        self._verified.pop(name, None)
        return MirrorFileState(name=name, complete=path.is_file(), size=path.stat().st_size if path.is_file() else 0)


def _offer(request: web.Request) -> tuple[MirrorFile, int]:
    try:
        file = MirrorFile(name=request.match_info["name"], size=int(request.query.get("size", "")),
                          sha256=request.query.get("sha256", ""))
        offset = int(request.query.get("offset", "0"))
    except (ValueError, ValidationError) as exc:
        raise MirrorRefused(f"not a valid mirror push: {exc}", code="invalid_mirror_push") from None
    if offset < 0:
        raise MirrorRefused("offset must be 0 or more", code="invalid_mirror_push")
    return file, offset


def routes(prefix: str, receiver: MirrorReceiver) -> list[web.RouteDef]:
    """The mirror's routes (``agent.api.mirror``) under ``prefix``, all on ``receiver``."""

    async def state(request: web.Request) -> web.Response:
        return web.json_response((await receiver.state(request.match_info["name"])).model_dump(mode="json"))

    async def push(request: web.Request) -> web.Response:
        file, offset = _offer(request)
        answer = await receiver.receive(file, offset, lambda: request.content.iter_chunked(CHUNK))
        return web.json_response(answer.model_dump(mode="json"))

    async def commit(request: web.Request) -> web.Response:
        try:
            body = MirrorCommit.model_validate(await request.json())
        except (ValueError, ValidationError) as exc:
            raise MirrorRefused(f"not a valid mirror commit: {exc}", code="invalid_mirror_commit") from None
        return web.json_response((await receiver.commit(body)).model_dump(mode="json"))

    async def discard(request: web.Request) -> web.Response:
        return web.json_response((await receiver.discard(request.match_info["name"])).model_dump(mode="json"))

    named = f"{prefix}{MIRROR_PATH}/{{name:.+}}"
    return [web.get(named, state), web.put(named, push), web.delete(named, discard),
            web.post(f"{prefix}{MIRROR_PATH}", commit)]
