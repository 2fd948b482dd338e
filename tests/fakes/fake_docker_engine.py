"""``FakeDockerEngine``: the few Docker Engine API answers a vLLM node's offer reads (``agent.runtimes.vllm``),
on a Unix socket of its own, for tests that need a node offering vLLM without a Docker engine: the
engine's version, one image with its labels (the vLLM version), and no containers. Anything else is
404, as an engine says of what it does not hold. The real engine and a fake vLLM image are
``tests/agent/_docker_support.py``."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from aiohttp import web

_LOGGER = logging.getLogger(__name__)


class FakeDockerEngine:
    def __init__(self, socket: Path, image: str, labels: dict[str, str], version: str = "27.3.1") -> None:
        self.socket, self.image, self.labels, self.version = socket, image, labels, version
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        path = request.path
        if path == "/version":
            return web.json_response({"Version": self.version, "ApiVersion": "1.47", "MinAPIVersion": "1.24"})
        rest = path.split("/", 2)[-1] if path.startswith("/v1.") else path.lstrip("/")
        if rest == "containers/json":
            return web.json_response([])
        if rest == f"images/{self.image}/json":
            image_id = "sha256:" + hashlib.sha256(self.image.encode()).hexdigest()
            name = self.image.rsplit(":", 1)[0]
            return web.json_response({"Id": image_id, "RepoDigests": [f"{name}@{image_id}"],
                                      "Config": {"Labels": self.labels}})
        return web.json_response({"message": f"No such object: {rest}"}, status=404)

    async def start(self) -> FakeDockerEngine:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket)).start()
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
