"""A release for the update tests: a key pair made here, a signed feed, and a feed server on loopback.

``ReleaseServer`` serves whatever bytes ``files`` holds (so a test can tamper with any of them)
and counts requests per path (so a test can say an artefact was never fetched).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.updates.staging import StagedUpdate
from core.releases.feed import ReleaseArtefact, ReleaseFeed, feed_bytes
from core.releases.signing import private_key_pem, public_key_b64, sign_bytes

_LOGGER = logging.getLogger(__name__)

APPIMAGE = "MirbadLLM-0.2.0-x86_64.AppImage"
PAYLOAD = b"#!/bin/sh\necho MirbadLLM 0.2.0\n" + bytes(range(256)) * 64


@dataclass
class ReleaseKey:
    path: Path
    public: str

    @classmethod
    def make(cls, folder: Path, name: str = "release.key") -> ReleaseKey:
        key = Ed25519PrivateKey.generate()
        path = folder / name
        path.write_bytes(private_key_pem(key))
        return cls(path, public_key_b64(key))

    def sign(self, data: bytes) -> bytes:
        return sign_bytes(data, self.path)


def feed_for(version: str, payload: bytes = PAYLOAD, **artefact: object) -> ReleaseFeed:
    import hashlib

    fields: dict[str, object] = {"platform": "linux-x86_64-appimage", "url": APPIMAGE, "size": len(payload),
                                 "sha256": hashlib.sha256(payload).hexdigest(), **artefact}
    return ReleaseFeed(version=version, published=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
                       artefacts=[ReleaseArtefact.model_validate(fields)])


@dataclass
class ReleaseServer:
    files: dict[str, bytes] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    server: TestServer | None = None

    async def start(self) -> None:
        async def serve(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            self.hits[name] += 1
            if name not in self.files:
                raise web.HTTPNotFound()
            return web.Response(body=self.files[name], content_type="application/octet-stream")

        app = web.Application()
        app.router.add_get("/releases/{name}", serve)  # every file of the release, feed and signature included
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    @property
    def feed_url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/releases/feed.json"))

    def publish(self, feed: ReleaseFeed, key: ReleaseKey, payload: bytes = PAYLOAD) -> None:
        raw = feed_bytes(feed)
        self.files.update({"feed.json": raw, "feed.json.sig": key.sign(raw), APPIMAGE: payload})


class FakeInstaller:
    """Applies nothing: records what it was asked to install."""

    def __init__(self, platform: str = "linux-x86_64-appimage", unsupported: str | None = None) -> None:
        self.platform = platform
        self.unsupported = unsupported
        self.applied: list[StagedUpdate] = []

    def apply(self, staged: StagedUpdate) -> Path:
        self.applied.append(staged)
        return staged.path

    def restart_command(self, program: Path, pid: int) -> list[str]:
        return [str(program)]
