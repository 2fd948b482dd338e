"""The demo daemon's access log (``requests``, ``request``), mixed into ``memory_daemon.DemoDaemon``.

Seeded: two hours of /v1 traffic as the demo fleet would see it: chats with the coder model from
Open WebUI and the laptop's key, completions on the small base model, embeddings refused while
that model starts, the failed Llama answered by its fallback, a refused key, an unknown model, a
key over its rate limit, a client that left, a slow answer that queued; and a new request every few
seconds while the demo runs. Bare: empty (a test adds rows with ``add_request``). Filters are the
daemon's own (``RequestFilters``): a bad one is 422 ``invalid_filter`` here too.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from daemon.api.access_log import RequestFilters
from daemon.api.client import DaemonError
from daemon.api.models import RequestRecord

_LOGGER = logging.getLogger(__name__)

_SEED_SPAN_S = 2 * 3600
_LIVE_EVERY_S = 7.0  # a new request this often while the demo runs
_CHAT, _COMPLETION, _EMBED = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
_NODE, _NODE_NAME = "local", "workstation"


def _ok(rng: random.Random, ts: float, model: str, path: str, key: str | None, *, fast: bool = False,
        answered_by: str | None = None, error: str | None = None) -> RequestRecord:
    prompt = rng.randint(12, 90) if fast else rng.randint(180, 2400)
    completion = rng.randint(8, 60) if fast else rng.randint(60, 700)
    queue = rng.uniform(0.2, 4) if rng.random() < 0.85 else rng.uniform(40, 600)
    ttft = prompt / (9000 if fast else 3400) * 1000 + rng.uniform(15, 60)
    total = queue + ttft + completion / (240 if fast else 88) * 1000
    return RequestRecord(id=uuid.UUID(int=rng.getrandbits(128)).hex, ts=ts, model=model, node=_NODE,
                         node_name=_NODE_NAME, path=path, status=200, queue_ms=round(queue, 1),
                         ttft_ms=round(ttft, 1), total_ms=round(total, 1), prompt_tokens=prompt,
                         completion_tokens=completion, key_id=key, answered_by=answered_by, error=error)


def _refused(rng: random.Random, ts: float, status: int, error: str, *, model: str | None = None,
             path: str = _CHAT, key: str | None = None, node: str | None = None) -> RequestRecord:
    return RequestRecord(id=uuid.UUID(int=rng.getrandbits(128)).hex, ts=ts, model=model, node=node,
                         node_name=_NODE_NAME if node else "", path=path, status=status,
                         queue_ms=0.0 if model else None, total_ms=round(rng.uniform(0.4, 3), 1),
                         key_id=key, error=error)


def _one(rng: random.Random, ts: float) -> RequestRecord:
    """One request of the demo's usual traffic (mostly answers, now and then a refusal)."""
    roll = rng.random()
    if roll < 0.55:
        return _ok(rng, ts, "qwen25-coder-7b", _CHAT, rng.choice(("k2", "k2", "k1")))
    if roll < 0.80:
        return _ok(rng, ts, "gemma3-270m", _COMPLETION, "k1", fast=True)
    if roll < 0.88:
        return _refused(rng, ts, 503, "model_not_ready: The model 'nomic-embed-text' is starting", model="nomic-embed",
                        path=_EMBED, key="k2", node=_NODE)
    if roll < 0.94:
        return _ok(rng, ts, "llama31-8b", _CHAT, "k2", answered_by="qwen25-coder-7b",
                   error="'llama31-8b' did not answer: model_not_ready: The model 'llama3.1-8b' is failed: llama-server "
                         "exited 1: cudaMalloc failed: out of memory (needed 16.0 GiB for the KV cache); answered by "
                         "the fallback 'qwen25-coder-7b'")
    return _refused(rng, ts, 401, "invalid_api_key: Invalid API key.", path="/v1/models")


def _seed(now: float) -> list[RequestRecord]:
    """Oldest first: the usual traffic, and one of each way a request goes wrong."""
    rng = random.Random(20260)
    rows = [_one(rng, now - _SEED_SPAN_S + n * _SEED_SPAN_S / 64 + rng.uniform(0, 60)) for n in range(64)]
    rows += [
        _refused(rng, now - 5400, 404, "model_not_found: The model 'gpt-4o' does not exist.", key="k2"),
        _refused(rng, now - 2900, 429, "rate_limited: This API key is limited to 60 requests per minute; "
                 "try again in 12 s.", key="k1", path=_COMPLETION),
        _ok(rng, now - 1500, "qwen25-coder-7b", _CHAT, "k2").model_copy(update={
            "status": 499, "completion_tokens": 41,
            "error": "the client closed the connection before the answer was complete"}),
        _ok(rng, now - 700, "qwen25-coder-7b", _CHAT, "k1").model_copy(update={
            "queue_ms": 2310.0, "ttft_ms": 1180.5, "total_ms": 14620.0, "prompt_tokens": 6120,
            "completion_tokens": 980}),  # a long prompt behind three others
    ]
    return sorted(rows, key=lambda r: r.ts)


class DemoRequests:
    live: bool

    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def access_log(self) -> list[RequestRecord]:
        """Oldest first, as the daemon writes them; a seeded demo's grows with the clock."""
        rows: list[RequestRecord] | None = self.__dict__.get("_demo_requests")
        if rows is None:
            now = time.time()
            rows = self.__dict__["_demo_requests"] = _seed(now) if self.live else []
            self.__dict__["_demo_requests_rng"] = random.Random(7)
        if self.live:
            rng: random.Random = self.__dict__["_demo_requests_rng"]
            while rows and time.time() - rows[-1].ts > _LIVE_EVERY_S:
                rows.append(_one(rng, rows[-1].ts + _LIVE_EVERY_S * rng.uniform(0.5, 1.0)))
        return rows

    def add_request(self, record: RequestRecord) -> RequestRecord:
        """A /v1 request as if the daemon had just logged it (for a test)."""
        self.access_log.append(record)
        return record

    async def requests(self, limit: int = 100, *, model: str | None = None, key_id: str | None = None,
                       status: str | None = None, slower_than_ms: float | None = None) -> list[RequestRecord]:
        self._record("requests", limit, model, key_id, status, slower_than_ms)
        try:
            filters = RequestFilters.model_validate(
                {k: v for k, v in {"model": model, "key_id": key_id, "status": status,
                                   "slower_than_ms": slower_than_ms, "limit": limit}.items() if v is not None})
        except ValidationError as exc:
            raise DaemonError(422, "invalid_filter", "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())) from None
        found = [r for r in reversed(self.access_log) if filters.matches(r)]
        return found[:filters.limit]

    async def request(self, request_id: str) -> RequestRecord:
        self._record("request", request_id)
        found = next((r for r in reversed(self.access_log) if r.id == request_id), None)
        if found is None:
            raise DaemonError(404, "request_not_found", f"No /v1 request with id '{request_id[:128]}' in the "
                              "access log: it keeps 30 days; check the id against the X-Request-Id header.")
        return found
