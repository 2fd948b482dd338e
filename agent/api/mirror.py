"""The checked mirror both sides agree on: the daemon pushes a model version's files into a node's models folder.

A model *version* is its files (a GGUF and, for a vision model, its ``--mmproj`` projector), each
named relative to the models folder and stated with its exact size and SHA-256. The daemon reaches
agents (agents never call the daemon), so the daemon pushes, over its mutual TLS (``/agent/v1``):

    GET    /mirror/{name}   -> MirrorFileState    # what the node has of it: the bytes so far and their SHA-256
    PUT    /mirror/{name}   -> MirrorFileState    # ?offset=N&size=S&sha256=H; body: the file from byte N
    POST   /mirror          -> MirrorCommitAnswer  # body: MirrorCommit; every file verified, then renamed in place
    DELETE /mirror/{name}   -> MirrorFileState    # drop what was received of it

A file is received under a temporary name beside its place (``.{file}.mirror``): ``offset`` 0
starts it again, any other offset must be the bytes the node already has (a cut transfer goes on
from there; 409 ``mirror_offset_mismatch`` says how many it has). Once all ``size`` bytes are
there the node hashes them: another SHA-256 is refused (422 ``mirror_checksum_mismatch``) and the
file is dropped. ``POST /mirror`` renames the version's files into place only when every one of
them is complete and verified (a file already in place with the same SHA-256 counts), so a
version is there whole or not at all. A file in place with other bytes is never replaced (409
``mirror_target_exists``). The agent's side is ``agent.sources.mirror``; the daemon's,
``daemon.sources.mirror``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, Field

from agent.api.client import AgentClient, agent_errors
from agent.api.models import API_PREFIX
from core.http import JsonHttp

MIRROR_PATH = "/mirror"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_VERSION_FILES = 8


class MirrorFile(BaseModel):
    """One file of a version: where it goes under the models folder, its size and SHA-256."""

    name: str = Field(min_length=1, max_length=1024, description="Relative to the models folder; '/' separates.")
    size: int = Field(ge=0)
    sha256: str = Field(pattern=SHA256_PATTERN)


class MirrorFileState(BaseModel):
    """What a node has of one file: ``complete`` when it is in place, else the bytes received so far."""

    name: str
    size: int = 0
    sha256: str = EMPTY_SHA256
    complete: bool = False


class MirrorCommit(BaseModel):
    files: list[MirrorFile] = Field(min_length=1, max_length=MAX_VERSION_FILES)


class MirrorCommitAnswer(BaseModel):
    paths: list[str] = Field(description="Each file's absolute path on the node, in the commit's order.")


class MirrorClient:
    """The mirror's routes on one agent, over that agent's client session and mutual TLS."""

    def __init__(self, client: AgentClient) -> None:
        self._http = JsonHttp(client.base_url, agent_errors(client.base_url), prefix=API_PREFIX,
                              session=client.session, ssl=client.ssl, connect_s=10)

    @staticmethod
    def _path(name: str) -> str:
        return f"{MIRROR_PATH}/{quote(name, safe='/')}"

    async def state(self, name: str) -> MirrorFileState:
        data = await self._http.call("GET", self._path(name), timeout=self._http.timeout(None, sock_read=600))
        return MirrorFileState.model_validate(data)

    async def push(self, file: MirrorFile, offset: int, body: AsyncIterator[bytes]) -> MirrorFileState:
        params: dict[str, Any] = {"offset": offset, "size": file.size, "sha256": file.sha256}
        text = await self._http.text("PUT", self._path(file.name), params=params, data=body,
                                     headers={"Content-Type": "application/octet-stream"},
                                     timeout=self._http.timeout(None, sock_read=600))
        return MirrorFileState.model_validate_json(text)

    async def commit(self, files: list[MirrorFile]) -> MirrorCommitAnswer:
        data = await self._http.call("POST", MIRROR_PATH, body=MirrorCommit(files=files).model_dump(mode="json"),
                                     timeout=self._http.timeout(None, sock_read=600))
        return MirrorCommitAnswer.model_validate(data)

    async def discard(self, name: str) -> MirrorFileState:
        return MirrorFileState.model_validate(await self._http.call("DELETE", self._path(name)))
