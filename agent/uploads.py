"""Receiving a body the daemon pushes (an agent build, a llama.cpp build's archive) into a partial
file: one way for ``agent.upgrade`` and ``agent.runtimes.rollout``.

``offer_from_query`` reads the offer (what the bytes must be) from the request's query;
``clear_stale`` removes what an earlier, interrupted upload left; ``receive_exact`` streams the
body to the partial file, capped at the offer's size, and refuses it unless it has exactly that
size and SHA-256 (the caller deletes the partial either way).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agent.problems import AgentProblem, validation_message

CHUNK = 1 << 20
Offer = TypeVar("Offer", bound=BaseModel)
Chunks = Callable[[], AsyncIterator[bytes]]


def offer_from_query(request: web.Request, model: type[Offer], refused: Callable[[str], AgentProblem]) -> Offer:
    """The request's query as ``model``; else the problem ``refused`` makes of what is wrong with it."""
    try:
        return model.model_validate(dict(request.query))
    except ValidationError as exc:
        raise refused(validation_message(exc, "query")) from None


def body_chunks(request: web.Request) -> Chunks:
    """The request's body, chunk by chunk, for ``receive_exact``."""
    return lambda: request.content.iter_chunked(CHUNK)


def clear_stale(folder: Path, *patterns: str) -> None:
    """Create ``folder``; remove what matches ``patterns`` in it (files or folders). Blocking."""
    folder.mkdir(parents=True, exist_ok=True)
    for pattern in patterns:
        for stale in folder.glob(pattern):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


async def receive_exact(partial: Path, size: int, sha256: str, chunks: Chunks, refused: type[AgentProblem], *,
                        named_by: str, what: str, nothing: str) -> None:
    """Stream ``chunks`` into ``partial`` (fsync'd); ``refused`` unless exactly ``size`` bytes with ``sha256``.

    The messages say ``what`` was received ("the build"), who names the figures (``named_by``: "the
    rollout") and that ``nothing`` happened ("nothing was installed")."""
    loop = asyncio.get_running_loop()
    digest, received = hashlib.sha256(), 0
    with partial.open("wb") as fh:
        async for chunk in chunks():
            received += len(chunk)
            if received > size:
                raise refused(f"size check failed: the body is larger than the {size} bytes {named_by} names; "
                              f"{nothing}")
            digest.update(chunk)
            await loop.run_in_executor(None, fh.write, chunk)
        await loop.run_in_executor(None, os.fsync, fh.fileno())
    if received != size:
        raise refused(f"size check failed: received {received} bytes, {named_by} names {size}; {nothing}")
    if digest.hexdigest() != sha256:
        raise refused(f"checksum check failed: {what}'s SHA-256 is {digest.hexdigest()}, {named_by} names "
                      f"{sha256}; {nothing}")
