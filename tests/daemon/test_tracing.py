"""OpenTelemetry tracing of /v1: the spans a real daemon leaves for a request, the traceparent it
sends its runtime (the fake llama-server writes down what it got), and the OTLP/HTTP export to a
collector (an aiohttp server of the test's, parsing the real exporter's protobuf)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from daemon.api.models import DaemonSettings, TracingSettings
from daemon.config import load_config
from daemon.paths import DaemonPaths
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.serving import serving

ROOT = Path(__file__).resolve().parents[2]
CHILDREN = ("admission", "queue", "upstream", "stream")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
PROMPT = "the secret plan for tuesday"


class Spans(InMemorySpanExporter):
    """The spans the daemon ended, and a way to wait for a request's span (ended last of its trace)."""

    def __init__(self) -> None:
        super().__init__()
        self._ended = asyncio.Event()

    def export(self, spans: Sequence[ReadableSpan]):  # type: ignore[no-untyped-def]
        result = super().export(spans)
        self._ended.set()  # span.end() runs on the daemon's loop, which is the test's
        return result

    async def requests(self, count: int) -> list[ReadableSpan]:
        async def enough() -> list[ReadableSpan]:
            while len(found := [s for s in self.get_finished_spans() if s.kind == SpanKind.SERVER]) < count:
                self._ended.clear()
                await self._ended.wait()
            return found

        return await asyncio.wait_for(enough(), 30)

    def trace_of(self, request: ReadableSpan) -> dict[str, list[ReadableSpan]]:
        """The request's children by name (a fallback's would add a second queue and upstream)."""
        found: dict[str, list[ReadableSpan]] = {}
        for span in self.get_finished_spans():
            if span.parent is not None and span.parent.span_id == request.context.span_id:
                found.setdefault(span.name, []).append(span)
        return found


class Collector:
    """An OTLP/HTTP traces receiver: POST /v1/traces with an ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.received: list[ExportTraceServiceRequest] = []
        self.content_types: list[str] = []
        self.changed = asyncio.Event()

    async def traces(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.received.append(message)
        self.changed.set()
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def span_names(self) -> list[str]:
        return [span.name for message in self.received for resource in message.resource_spans
                for scope in resource.scope_spans for span in scope.spans]


@asynccontextmanager
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    receiver = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    async with serving(app) as url:
        yield receiver, f"{url}/v1/traces"


@asynccontextmanager
async def traced_daemon(tmp_path: Path, model_file: Path, endpoint: str, runtime: dict[str, object] | None = None,
                        tracing_ratio: float = 1.0, **config: object) -> AsyncIterator[tuple[RunningDaemon, Spans, Path]]:
    """A daemon with tracing on, its model "m" ready on a fake runtime that writes down the
    trace headers it gets; its spans are also kept in memory for the test to read."""
    headers = tmp_path / "headers.jsonl"
    fake = write_fake_runtime(tmp_path / "bin", tokens=4, headers_file=str(headers), **(runtime or {}))
    tracing = {"enabled": True, "endpoint": endpoint, "service_name": "test-daemon", "sample_ratio": tracing_ratio}
    async with running_daemon(tmp_path / "home", fake, tracing=tracing, **config) as d:
        assert d.daemon.router.tracing is not None
        spans = Spans()
        d.daemon.router.tracing.provider.add_span_processor(SimpleSpanProcessor(spans))
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        yield d, spans, headers


def _runtime_saw(headers: Path, path: str = "/v1/chat/completions") -> list[dict[str, str | None]]:
    lines = headers.read_text().splitlines() if headers.exists() else []
    return [seen for seen in map(json.loads, lines) if seen["path"] == path]


def _traceparent(span: ReadableSpan) -> str:
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _no_secret_in(spans: Sequence[ReadableSpan], *secrets: str) -> None:
    for span in spans:
        texts = [str(v) for v in (span.attributes or {}).values()] + [span.status.description or ""]
        texts += [str(v) for event in span.events for v in (event.attributes or {}).values()]
        for secret in secrets:
            assert not any(secret in text for text in texts), (span.name, secret)


async def test_a_plain_and_a_streamed_request_each_leave_a_request_span_and_its_four_steps(
        tmp_path: Path, model_file: Path) -> None:
    async with collector() as (receiver, endpoint):
        async with traced_daemon(tmp_path, model_file, endpoint) as (d, spans, headers):
            client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
            answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}])
            assert answer.choices[0].message.content
            [plain] = await spans.requests(1)

            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": PROMPT}], stream=True,
                extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
            assert text
            await client.close()
            streamed = next(s for s in await spans.requests(2) if s is not plain)

            # The plain request: a new trace, the request span its root, the four steps its children.
            assert plain.name == "POST /v1/chat/completions" and plain.parent is None
            assert plain.attributes is not None and plain.status.status_code == StatusCode.UNSET
            assert plain.attributes["mirbadllm.model"] == "m" and plain.attributes["mirbadllm.node"] == "local"
            assert plain.attributes["http.response.status_code"] == 200
            assert plain.attributes["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
            assert plain.attributes["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens
            steps = spans.trace_of(plain)
            assert sorted(steps) == sorted(CHILDREN) and all(len(found) == 1 for found in steps.values())
            upstream = steps["upstream"][0]
            assert upstream.kind == SpanKind.CLIENT and upstream.attributes is not None
            assert upstream.attributes["http.response.status_code"] == 200
            assert upstream.attributes["mirbadllm.model"] == "m"
            assert all(s[0].context.trace_id == plain.context.trace_id for s in steps.values())

            # The client's traceparent is the streamed request's parent: one trace with the client's.
            assert streamed.parent is not None and f"{streamed.parent.span_id:016x}" == CLIENT_SPAN
            assert f"{streamed.context.trace_id:032x}" == CLIENT_TRACE
            assert streamed.attributes is not None and streamed.attributes["gen_ai.usage.output_tokens"] > 0
            steps_streamed = spans.trace_of(streamed)
            assert sorted(steps_streamed) == sorted(CHILDREN)
            assert [e.name for e in steps_streamed["stream"][0].events] == ["first_chunk"]

            # The runtime got each request's upstream span as its parent, not the client's.
            seen = [s["traceparent"] for s in _runtime_saw(headers)]
            assert seen == [_traceparent(upstream), _traceparent(steps_streamed["upstream"][0])]
            _no_secret_in(spans.get_finished_spans(), PROMPT, "tuesday")

        # The daemon's stop exports what was left; the collector got protobuf from the real exporter.
        assert set(receiver.content_types) == {"application/x-protobuf"}
        names = receiver.span_names()
        assert names.count("POST /v1/chat/completions") == 2
        assert all(names.count(step) == 2 for step in CHILDREN)
        resource = receiver.received[0].resource_spans[0].resource
        service = {a.key: a.value.string_value for a in resource.attributes}["service.name"]
        assert service == "test-daemon"


async def test_refusals_and_an_upstream_error_mark_the_spans_that_failed(tmp_path: Path, model_file: Path) -> None:
    async with collector() as (_, endpoint), \
            traced_daemon(tmp_path, model_file, endpoint, {"break_after": 2}, require_api_keys=True) as (d, spans, headers):
        key = (await d.client.create_key("tracing")).key
        async with aiohttp.ClientSession() as session:
            async def post(path: str, body: object, secret: str | None = key) -> int:
                sent = {"Authorization": f"Bearer {secret}"} if secret else {}
                async with session.post(f"{d.v1}{path}", json=body, headers=sent) as response:
                    await response.read()
                    return response.status

            # No key: refused at admission, nothing queued or sent.
            assert await post("/chat/completions", {"model": "m", "messages": []}, secret=None) == 401
            [refused] = await spans.requests(1)
            assert refused.status.status_code == StatusCode.ERROR
            assert "invalid_api_key" in (refused.status.description or "")
            steps = spans.trace_of(refused)
            assert list(steps) == ["admission"] and steps["admission"][0].status.status_code == StatusCode.ERROR

            # An unknown model: refused at admission too.
            assert await post("/chat/completions", {"model": "nope", "messages": []}) == 404
            unknown = next(s for s in await spans.requests(2) if s is not refused)
            assert list(spans.trace_of(unknown)) == ["admission"]
            assert "model_not_found" in (unknown.status.description or "")

            # The runtime answers 501 (no --embeddings): the upstream span and the request's err.
            assert await post("/embeddings", {"model": "m", "input": PROMPT}) == 501
            failed = next(s for s in await spans.requests(3) if s not in (refused, unknown))
            assert failed.status.status_code == StatusCode.ERROR and failed.attributes is not None
            assert failed.attributes["http.response.status_code"] == 501
            steps = spans.trace_of(failed)
            assert sorted(steps) == sorted(CHILDREN)
            upstream = steps["upstream"][0]
            assert upstream.status.status_code == StatusCode.ERROR and upstream.attributes is not None
            assert upstream.attributes["http.response.status_code"] == 501
            assert steps["queue"][0].status.status_code == StatusCode.UNSET
            assert [s["traceparent"] for s in _runtime_saw(headers, "/v1/embeddings")] == [_traceparent(upstream)]

            # A stream that dies mid-answer: the upstream answered (200), the stream span failed.
            chat = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
            async with session.post(f"{d.v1}/chat/completions", json=chat,
                                    headers={"Authorization": f"Bearer {key}"}) as response:
                assert response.status == 200  # the status went out before the break
                with pytest.raises(aiohttp.ClientPayloadError):
                    await response.read()  # cut without a last chunk: no client takes it for complete
            broken = next(s for s in await spans.requests(4) if s not in (refused, unknown, failed))
            assert broken.attributes is not None and broken.attributes["http.response.status_code"] == 502
            steps = spans.trace_of(broken)
            assert steps["upstream"][0].status.status_code == StatusCode.UNSET
            assert steps["stream"][0].status.status_code == StatusCode.ERROR
            assert "broke" in (steps["stream"][0].status.description or "")

        _no_secret_in(spans.get_finished_spans(), key, PROMPT)


async def test_tracing_is_off_by_default_no_spans_and_no_traceparent(tmp_path: Path, model_file: Path) -> None:
    headers = tmp_path / "headers.jsonl"
    runtime = write_fake_runtime(tmp_path / "bin", tokens=4, headers_file=str(headers))
    home = tmp_path / "home"
    async with running_daemon(home, runtime) as d:
        assert d.daemon.router.tracing is None
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        await client.close()
        assert _runtime_saw(headers) == [{"path": "/v1/chat/completions", "traceparent": None, "tracestate": None}]

        # Turned on from the API: saved, reported, applied at the next start (the router's is built then).
        wanted = TracingSettings(enabled=True, endpoint="http://collector.lan:4318/v1/traces", sample_ratio=0.25)
        saved = await d.client.put_settings((await d.client.get_settings()).model_copy(update={"tracing": wanted}))
        assert saved.tracing == wanted and d.daemon.router.tracing is None
        # A client that sets only what it knows leaves [tracing] as it is.
        assert (await d.client.put_settings(DaemonSettings(require_api_keys=False))).tracing == wanted

    config = DaemonPaths(home).config
    assert tomllib.loads(config.read_text())["tracing"]["sample_ratio"] == 0.25
    assert load_config(config).tracing == wanted

    # Off, the daemon does not even import OpenTelemetry (the router's per-request cost stays as it was).
    probe = ("import sys; from daemon.config import DaemonConfig; from daemon.deps import build_deps; "
             "from daemon.paths import DaemonPaths; from pathlib import Path; "
             f"build_deps(DaemonConfig(local_agent=False), DaemonPaths(Path({str(tmp_path / 'probe')!r}))); "
             "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", probe, cwd=ROOT,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert out.decode().strip() == "[]"


async def test_a_sample_ratio_of_zero_keeps_no_new_trace_but_follows_a_sampled_client(
        tmp_path: Path, model_file: Path) -> None:
    async with collector() as (_, endpoint), \
            traced_daemon(tmp_path, model_file, endpoint, tracing_ratio=0.0) as (d, spans, headers):
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                             extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
        await client.close()
        [kept] = await spans.requests(1)
        assert f"{kept.context.trace_id:032x}" == CLIENT_TRACE and sorted(spans.trace_of(kept)) == sorted(CHILDREN)
        assert {s.context.trace_id for s in spans.get_finished_spans()} == {kept.context.trace_id}
        # The runtime is told the first trace is not sampled (flags 00), and the client's is.
        unsampled, sampled = [s["traceparent"] or "" for s in _runtime_saw(headers)]
        assert unsampled.startswith("00-") and int(unsampled[-2:], 16) & 1 == 0
        assert sampled.startswith(f"00-{CLIENT_TRACE}-") and int(sampled[-2:], 16) & 1 == 1
