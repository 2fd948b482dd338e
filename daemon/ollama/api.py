"""The Ollama API's handlers: each call made into its /v1 call, sent to the daemon's own /v1 on this
machine with the caller's key and request id, and the answer put back in Ollama's shape.

/v1 decides everything a request meets (the key and its limits, the model's queue, a start on
request, fallbacks) and writes the call's one access-log row; nothing here repeats it. A model
name Ollama's way (``gemma3:latest``) is the served name as it is, else without ``:latest``.
``/api/tags`` and ``/api/show`` ask /v1's model list (so the key is checked and the call logged),
then add what the model's file says (``daemon.ollama.facts``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from daemon.api.models import ModelDefinition, ModelState
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry
from daemon.ollama.answers import (
    Answer,
    UpstreamError,
    created_at,
    embeddings,
    sse_events,
)
from daemon.ollama.facts import ModelFacts
from daemon.ollama.requests import (
    BadRequest,
    chat_request,
    embed_request,
    generate_request,
    is_streamed,
    model_name,
)
from daemon.router.router import REQUEST_ID

_LOGGER = logging.getLogger(__name__)

# The Ollama release whose API this follows: clients gate features on it (structured outputs, tools).
OLLAMA_VERSION = "0.12.0"
CONNECT_TIMEOUT_S = 10.0  # to our own /v1; an answer has no read timeout (a generation takes what it takes)
FORWARDED = ("Authorization", "x-api-key")  # the caller's key: /v1 checks it


class OllamaProblem(Exception):
    """An error the Ollama client sees: ``{"error": message}`` with ``status`` (``daemon.ollama.app``)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _ndjson(line: dict[str, Any]) -> bytes:
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


class OllamaApi:
    def __init__(self, registry: Registry, orchestrator: Orchestrator, facts: ModelFacts,
                 v1_base: Callable[[], str]) -> None:
        self._registry = registry
        self._orchestrator = orchestrator
        self._facts = facts
        self._v1_base = v1_base  # http://127.0.0.1:<port>, read per call: the port is known once listening
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            connector=aiohttp.TCPConnector(limit=0))  # no cap: /v1's gates queue, not this pool

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # --- the calls to /v1 --------------------------------------------------------------------------
    @asynccontextmanager
    async def _v1(self, request: web.Request, method: str, path: str, name: str | None,
                  payload: dict[str, Any] | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """The /v1 call, as the caller: its key and request id go along; a refusal is raised in
        Ollama's words (``name``: the model the caller named, for a 404)."""
        assert self._session is not None
        headers = {h: request.headers[h] for h in FORWARDED if h in request.headers}
        headers["X-Request-Id"] = request[REQUEST_ID]
        try:
            answer = await self._session.request(method, self._v1_base() + path, json=payload, headers=headers)
        except aiohttp.ClientConnectionError as exc:
            raise OllamaProblem(502, f"the daemon's /v1 could not be reached: {exc}") from None
        ended = False
        try:
            if answer.status >= 400:
                raise await _refusal(answer, name)
            yield answer
            ended = True
        finally:
            if ended:
                answer.release()
            else:  # the caller left or the answer failed: /v1 sees the hang-up and frees the slot
                answer.close()

    def _served(self, name: str) -> str:
        """The served name an Ollama-style name stands for: itself, else without ``:latest``."""
        base, _, tag = name.rpartition(":")
        if self._definition(name) is None and tag == "latest" and base and self._definition(base) is not None:
            return base
        return name

    def _definition(self, served: str) -> ModelDefinition | None:
        found = self._registry.by_served_name(served)
        adapter = self._registry.by_adapter_name(served) if found is None else None
        return adapter[0] if adapter is not None else found

    async def _known(self, request: web.Request, name: str) -> tuple[str, ModelDefinition]:
        """The model a request names, once /v1 lists it for this caller (404 otherwise)."""
        served = self._served(name)
        async with self._v1(request, "GET", f"/v1/models/{quote(served, safe='/:')}", name):
            pass
        definition = self._definition(served)
        if definition is None:  # removed in between
            raise OllamaProblem(404, f"model '{name}' not found")
        return served, definition

    # --- handlers ----------------------------------------------------------------------------------
    async def root(self, request: web.Request) -> web.StreamResponse:
        """Ollama's own words, which tools look for to tell that an Ollama API answers here."""
        return web.Response(text="Ollama is running")

    async def version(self, request: web.Request) -> web.StreamResponse:
        """The Ollama version whose API this follows (no key: clients call it to find the server)."""
        return web.json_response({"version": OLLAMA_VERSION})

    async def tags(self, request: web.Request) -> web.StreamResponse:
        """Every model a request can start, as ``/v1/models`` lists them, with what its file says."""
        async with self._v1(request, "GET", "/v1/models", None) as answer:
            listed = [str(m.get("id")) for m in (await answer.json()).get("data") or []]
        found = [(name, d) for name in listed if (d := self._definition(name)) is not None]
        summaries = await self._facts.summaries([d for _, d in found])
        return web.json_response({"models": [self._facts.entry(name, d, s)
                                             for (name, d), s in zip(found, summaries, strict=True)]})

    async def ps(self, request: web.Request) -> web.StreamResponse:
        """The models loaded now, with their memory where the runtime said it."""
        async with self._v1(request, "GET", "/v1/models", None) as answer:
            listed = [str(m.get("id")) for m in (await answer.json()).get("data") or []]
        loaded = []
        for name in listed:
            definition = self._definition(name)
            if definition is not None and definition.served_name == name:  # not its adapters again
                status = self._orchestrator.status(definition)
                if status.state == ModelState.READY:
                    loaded.append((name, definition, status))
        summaries = await self._facts.summaries([d for _, d, _ in loaded])
        return web.json_response({"models": [self._facts.loaded(name, d, status, s)
                                             for (name, d, status), s in zip(loaded, summaries, strict=True)]})

    async def show(self, request: web.Request) -> web.StreamResponse:
        """One model: its details, the header facts clients read, and what it can do."""
        name = model_name(await _json_body(request))
        served, definition = await self._known(request, name)
        summary = await self._facts.summary(definition)
        capabilities = ["embedding"] if definition.settings.embeddings else ["completion", "tools"]
        return web.json_response({
            "modelfile": f"# Served by MirbadLLM as '{served}'\nFROM {definition.model_path}\n",
            "parameters": "", "template": "", "license": "",
            "details": self._facts.details(definition, summary), "model_info": self._facts.model_info(summary),
            "capabilities": capabilities, "modified_at": self._facts.modified_at()})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """A chat turn: ``/v1/chat/completions``, streamed as NDJSON unless ``stream`` is false."""
        body = await _json_body(request)
        name, stream = model_name(body), is_streamed(body)
        if not body.get("messages"):  # Ollama loads the model and says so
            await self._known(request, name)
            return web.json_response({"model": name, "created_at": created_at(), "done": True, "done_reason": "load",
                                      "message": {"role": "assistant", "content": ""}})
        payload = chat_request(body, self._served(name), stream)
        return await self._generate(request, name, "/v1/chat/completions", payload, Answer(name, chat=True))

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """A prompt's completion: the prompt as a chat turn (``raw``: ``/v1/completions``)."""
        body = await _json_body(request)
        name, stream = model_name(body), is_streamed(body)
        if not body.get("prompt") and not body.get("images"):  # Ollama loads the model and says so
            await self._known(request, name)
            return web.json_response({"model": name, "created_at": created_at(), "response": "", "done": True,
                                      "done_reason": "load"})
        path, payload = generate_request(body, self._served(name), stream)
        return await self._generate(request, name, path, payload, Answer(name, chat=False))

    async def embed(self, request: web.Request) -> web.StreamResponse:
        """Embeddings of one text or several: ``/v1/embeddings``."""
        body = await _json_body(request)
        name = model_name(body)
        payload = embed_request(body, self._served(name), legacy=False)
        if payload["input"] in ("", []):  # Ollama loads the model and answers no embedding
            await self._known(request, name)
            return web.json_response({"model": name, "embeddings": []})
        answer = Answer(name, chat=False)
        async with self._v1(request, "POST", "/v1/embeddings", name, payload) as upstream:
            return web.json_response(embeddings(await upstream.json(content_type=None), name, answer.started))

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        """The older ``/api/embeddings``: one ``prompt``, one ``embedding``."""
        body = await _json_body(request)
        name = model_name(body)
        payload = embed_request(body, self._served(name), legacy=True)
        async with self._v1(request, "POST", "/v1/embeddings", name, payload) as upstream:
            data = (await upstream.json(content_type=None)).get("data") or [{}]
        return web.json_response({"embedding": data[0].get("embedding") or []})

    async def _generate(self, request: web.Request, name: str, path: str, payload: dict[str, Any],
                        answer: Answer) -> web.StreamResponse:
        async with self._v1(request, "POST", path, name, payload) as upstream:
            if not payload["stream"]:
                return web.json_response(answer.whole(await upstream.json(content_type=None)))
            response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await response.prepare(request)
            try:
                async for event in sse_events(upstream.content):
                    for line in answer.chunk(event):
                        await response.write(_ndjson(line))
                for line in answer.last():
                    await response.write(_ndjson(line))
            except UpstreamError as exc:  # Ollama's way: a line with the error ends the stream
                await response.write(_ndjson({"error": str(exc)}))
            except aiohttp.ClientError as exc:  # /v1's connection broke mid-answer
                await response.write(_ndjson({"error": f"the answer broke off: {exc}"}))
            await response.write_eof()
            return response


async def _refusal(answer: aiohttp.ClientResponse, name: str | None) -> OllamaProblem:
    """/v1's error as Ollama's: its message, its status; an unknown model in Ollama's words."""
    try:
        error = (await answer.json(content_type=None)).get("error") or {}
    except (ValueError, aiohttp.ClientError):
        error = {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    if answer.status == 404 and error.get("code") == "model_not_found" and name is not None:
        return OllamaProblem(404, f"model '{name}' not found")
    headers = {"Retry-After": answer.headers["Retry-After"]} if "Retry-After" in answer.headers else None
    return OllamaProblem(answer.status, str(error.get("message") or answer.reason or "error"), headers)
