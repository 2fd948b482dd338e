"""External endpoints as models: an OpenAI-compatible server the router calls itself (runtime ``external``).

No agent runs such a model and it is placed on no node. ``ExternalEndpoints`` is everything the
daemon knows of them:

- the key: ``api_key_file`` (a path on the daemon's machine) is read on each request and each
  probe, so a key rotated in the file is used at once; its content is never stored, logged or
  shown (the admin API shows the path). A key that cannot be read is a ``KeyUnreadable`` that
  names the path and the reason, never the content.
- readiness: ``GET {base_url}/models`` with the key, at most every ``PROBE_INTERVAL_S`` per model
  (``watch`` in the background, ``probe`` on a start or when no answer is known yet), never per
  request. A 2xx is ready; anything else is failed with the reason.
- where a request goes: ``upstream`` gives the relay's ``Upstream`` on a session of its own that
  verifies TLS (the system's CA store), with ``Authorization: Bearer <key>``; its router target
  (``daemon.nodes.answer.at_endpoint``) strips ``/v1`` from the request's path for ``base_url``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from agent.api.runtimes import profile
from core.relay import Upstream, describe, runtime_session
from daemon.api.models import ModelDefinition, ModelState, ModelStatus

_LOGGER = logging.getLogger(__name__)

PROBE_INTERVAL_S = 30.0
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=10)
WATCH_TICK_S = 1.0
MAX_KEY_BYTES = 16384


class KeyUnreadable(Exception):
    """The key file could not be read; the message names the path and why (never any content)."""


def read_key(path: str) -> str:
    """The key in ``path``: its first line, stripped. Read each time it is asked for."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise KeyUnreadable(f"the key file '{path}' cannot be read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_KEY_BYTES:
        raise KeyUnreadable(f"the key file '{path}' is larger than {MAX_KEY_BYTES} bytes")
    lines = data.decode("utf-8", "replace").strip().splitlines()
    key = lines[0].strip() if lines else ""
    if not key:
        raise KeyUnreadable(f"the key file '{path}' is empty")
    return key


def _auth(definition: ModelDefinition) -> tuple[dict[str, str], str | None]:
    if definition.api_key_file is None:
        return {}, None
    key = read_key(definition.api_key_file)
    return {"Authorization": f"Bearer {key}"}, key


@dataclass(frozen=True)
class Probe:
    """The last answer of one model's endpoint, for the definition it was asked with."""

    target: tuple[str | None, str | None]  # (base_url, api_key_file): a changed one asks again
    at: float
    error: str | None  # None: it answered

    @property
    def ready(self) -> bool:
        return self.error is None


class ExternalEndpoints:
    def __init__(self, clock: Callable[[], float] = time.monotonic, interval_s: float = PROBE_INTERVAL_S) -> None:
        self._clock = clock
        self.interval_s = interval_s
        self._probes: dict[str, Probe] = {}
        self._inflight: dict[str, asyncio.Task[Probe]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._started_at: dict[str, float] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session to external servers: pooled, TLS verified, opened on first use."""
        if self._session is None or self._session.closed:
            self._session = runtime_session(True)
        return self._session

    async def close(self) -> None:
        for task in self._inflight.values():
            task.cancel()
        if self._session is not None:
            await self._session.close()

    # --- status ------------------------------------------------------------------------------------
    def _known(self, definition: ModelDefinition) -> Probe | None:
        probe = self._probes.get(definition.id)
        if probe is None or probe.target != (definition.base_url, definition.api_key_file):
            return None
        return probe

    def status(self, definition: ModelDefinition) -> ModelStatus:
        """Ready when the endpoint last answered, failed with why when it did not, starting before
        the first answer."""
        probe = self._known(definition)
        state = ModelState.STARTING if probe is None else ModelState.READY if probe.ready else ModelState.FAILED
        return ModelStatus(id=definition.id, served_name=definition.served_name, node=definition.node,
                           endpoint=definition.base_url, state=state, error=probe.error if probe else None,
                           started_at=self._started_at.get(definition.id) if state == ModelState.READY else None)

    def stale(self, definition: ModelDefinition) -> bool:
        probe = self._known(definition)
        return probe is None or self._clock() - probe.at >= self.interval_s

    async def probe(self, definition: ModelDefinition) -> Probe:
        """Ask the endpoint now (concurrent askers of one model share one probe)."""
        task = self._inflight.get(definition.id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._probe(definition))
            self._inflight[definition.id] = task
        return await asyncio.shield(task)

    async def ensure_probed(self, definition: ModelDefinition) -> None:
        """Probe only when nothing is known of the endpoint as it is defined now."""
        if self._known(definition) is None:
            await self.probe(definition)

    async def _probe(self, definition: ModelDefinition) -> Probe:
        target = (definition.base_url, definition.api_key_file)
        error = await self._ask(definition)
        probe = Probe(target, self._clock(), error)
        previous = self._probes.get(definition.id)
        if error is None and (previous is None or not previous.ready):
            self._started_at[definition.id] = time.time()
        if previous is None or previous.error != error:
            if error is None:
                _LOGGER.info("external model %s: %s answers", definition.id, definition.base_url)
            else:
                _LOGGER.warning("external model %s: %s", definition.id, error)
        self._probes[definition.id] = probe
        return probe

    async def _ask(self, definition: ModelDefinition) -> str | None:
        base = (definition.base_url or "").rstrip("/")
        try:
            headers, key = _auth(definition)
        except KeyUnreadable as exc:
            return str(exc)
        try:
            async with self.session.get(f"{base}/models", headers=headers, timeout=PROBE_TIMEOUT,
                                        allow_redirects=False) as answer:
                if 200 <= answer.status < 300:
                    return None
                return f"{base}/models answered HTTP {answer.status}" + (
                    " (the key was refused)" if answer.status in (401, 403) else "")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"{base} cannot be reached: {describe(exc, key)}"

    def forget(self, model_id: str) -> None:
        self._probes.pop(model_id, None)
        self._started_at.pop(model_id, None)

    async def watch(self, definitions: Callable[[], list[ModelDefinition]],
                    changed: Callable[[ModelDefinition], None]) -> None:
        """Keep every external model's answer fresh; ``changed`` is told when a state may have moved."""
        try:
            while True:
                models = [d for d in definitions() if not profile(d.runtime).on_node]
                names = {d.id for d in models}
                for model_id in [m for m in self._probes if m not in names]:
                    self.forget(model_id)
                stale = [d for d in models if self.stale(d)]
                await asyncio.gather(*(self.probe(d) for d in stale))
                for definition in stale:
                    changed(definition)
                await asyncio.sleep(WATCH_TICK_S)
        finally:
            await self.close()

    def upstream(self, definition: ModelDefinition) -> Upstream:
        """Where a request for ``definition`` goes, with the key read now; ``KeyUnreadable`` if it cannot be."""
        headers, key = _auth(definition)
        base = (definition.base_url or "").rstrip("/")
        return Upstream(base, headers, self.session, True, key)
