"""The agent's HTTP API over real mutual TLS on loopback, driven by the real ``AgentClient``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from agent.api.client import AgentClient, AgentError, iter_sse_data
from agent.api.models import GpuInfo, InstanceInfo, InstanceState
from agent.deps import AgentDeps, build_deps
from agent.identity import server_ssl_context
from agent.server import create_app, start_server
from daemon.pki import CertificateAuthority, fingerprint
from tests.agent._support import TlsMaterial, eventually, issue_tls, make_spec
from tests.fakes import FakeGpuProbe

GPU = GpuInfo(index=0, name="Fake RTX", uuid="GPU-0", memory_total=8 << 30, memory_used=1 << 30)


@dataclass
class Agent:
    deps: AgentDeps
    client: AgentClient
    url: str
    tls: TlsMaterial


@pytest.fixture
async def start_agent(tmp_path: Path, port_base: int) -> AsyncIterator[Callable[..., object]]:
    """``await start_agent(exe)``: an agent on 127.0.0.1 with mTLS and a client holding a daemon cert."""
    cleanups: list[Callable[[], object]] = []

    async def start(exe: Path | None) -> Agent:
        home = tmp_path / "agent"
        tls = issue_tls(tmp_path, home / "identity")
        deps = build_deps(home, llama_server=exe, telemetry_interval_s=0.05, gpu_probe=FakeGpuProbe([GPU]),
                          first_port=port_base)
        runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
        url = f"https://127.0.0.1:{port}"
        client = AgentClient(url, tls.client_context())

        async def cleanup() -> None:
            await client.close()
            runs = list(deps.manager.runs())
            for instance_id in runs:
                await deps.manager.stop(instance_id, timeout=2)
            await runner.cleanup()

        cleanups.append(cleanup)
        return Agent(deps, client, url, tls)

    yield start
    for cleanup in cleanups:
        await cleanup()  # type: ignore[misc]


async def _until_state(client: AgentClient, instance_id: str, state: InstanceState) -> InstanceInfo:
    """Follow the instances long-poll until ``instance_id`` is in ``state``."""
    page = await client.instances()
    for _ in range(50):
        found = [i for i in page.instances if i.instance_id == instance_id]
        if found and found[0].state is state:
            return found[0]
        page = await client.instances(since=page.version, timeout=10)
    raise AssertionError(f"{instance_id} never became {state}: {page}")


async def test_status_names_the_node_and_its_runtimes(start_agent, fake_runtime) -> None:  # type: ignore[no-untyped-def]
    exe = fake_runtime()
    agent = await start_agent(exe)
    status = await agent.client.status()
    assert status.node_id == fingerprint(agent.deps.identity.cert)
    assert status.runtimes == {"llamacpp": str(exe)}
    assert status.gpus == [GPU] and status.cpu_count >= 1 and status.memory_total > 0


async def test_start_long_poll_logs_and_stop(start_agent, fake_runtime, model_file) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(fake_runtime(load_seconds=0.6))
    client: AgentClient = agent.client
    first = await client.instances()
    assert first.instances == []
    started = await client.start(make_spec(model_file, served_name="Tiny"))
    assert started.state is InstanceState.STARTING
    # A long-poll at the current version waits for the next change instead of answering at once.
    page = await client.instances(since=first.version, timeout=10)
    assert page.version > first.version
    ready = await _until_state(client, "m", InstanceState.READY)
    assert ready.endpoint and ready.api_key and ready.served_name == "Tiny"
    assert (await client.instance("m")).pid == ready.pid

    lines = [line async for line in client.logs("m", tail=100)]
    assert "main: model loaded" in lines and any("loading tensors" in line for line in lines)
    assert [line async for line in client.logs("m", tail=2)] == lines[-2:]

    with pytest.raises(AgentError) as refused:
        await client.start(make_spec(model_file))
    assert (refused.value.status, refused.value.code) == (409, "already_running")

    stopped = await client.stop("m", timeout=5)
    assert (stopped.state, stopped.stop_requested) == (InstanceState.STOPPED, True)


async def test_logs_follow_streams_new_lines(start_agent, fake_runtime, model_file) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(fake_runtime(load_seconds=1.0))
    await agent.client.start(make_spec(model_file))
    seen: list[str] = []

    async def follow() -> None:
        async for line in agent.client.logs("m", tail=0, follow=True):
            seen.append(line)
            if line == "srv  update_slots: all slots are idle":
                return

    await asyncio.wait_for(follow(), 20)
    assert "main: model loaded" in seen


async def test_errors_are_envelopes(start_agent, fake_runtime, model_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(fake_runtime())
    client: AgentClient = agent.client
    cases = [
        (client.instance("nope"), 404, "instance_not_found"),
        (client.start(make_spec(model_file, env={"LD_PRELOAD": "/x.so"})), 422, "spec_rejected"),
        (client.start(make_spec(tmp_path / "missing.gguf")), 422, "spec_rejected"),
        (client._call("POST", "/instances", body={"instance_id": "Bad Id"}), 422, "spec_rejected"),
        (client._call("GET", "/no/such/route"), 404, "not_found"),
        (client._call("GET", "/proxy/nope/v1/models"), 404, "instance_not_found"),
    ]
    for call, status, code in cases:
        with pytest.raises(AgentError) as caught:
            await call
        assert (caught.value.status, caught.value.code) == (status, code), caught.value.message
    assert "LD_PRELOAD" in (await _error_of(client.start(make_spec(model_file, env={"LD_PRELOAD": "x"})))).message


async def _error_of(call: object) -> AgentError:
    try:
        await call  # type: ignore[misc]
    except AgentError as exc:
        return exc
    raise AssertionError("no error")


async def test_no_runtime_is_503(start_agent, model_file) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(Path("/nonexistent/llama-server"))
    error = await _error_of(agent.client.start(make_spec(model_file)))
    assert (error.status, error.code) == (503, "no_runtime")


async def test_proxy_streams_with_the_instance_key(start_agent, fake_runtime, model_file) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(fake_runtime(tokens=6, token_delay_s=0.02))
    client: AgentClient = agent.client
    await client.start(make_spec(model_file, served_name="Tiny"))
    await _until_state(client, "m", InstanceState.READY)
    url = client.proxy_url("m", "/v1/chat/completions")
    body = {"model": "Tiny", "messages": [{"role": "user", "content": "say hi"}]}
    # The caller's own Authorization is replaced by the instance key.
    headers = {"Authorization": "Bearer not-the-key"}
    async with client.session.post(url, json=body, headers=headers) as resp:
        assert resp.status == 200
        whole = await resp.json()
    assert whole["choices"][0]["message"]["content"] == "Hello from the fake llama server"
    assert whole["usage"]["completion_tokens"] == 6

    async with client.session.post(url, json={**body, "stream": True}) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert "Transfer-Encoding" not in resp.headers or resp.headers["Transfer-Encoding"] == "chunked"
        events = [event async for event in iter_sse_data(resp.content)]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "Hello from the fake llama server"
    assert chunks[-1]["usage"]["completion_tokens"] == 6

    async with client.session.get(client.proxy_url("m", "/v1/models")) as resp:
        assert (await resp.json())["data"][0]["id"] == "Tiny"


async def test_proxy_client_disconnect_frees_the_slot(start_agent, fake_runtime, model_file) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(fake_runtime(tokens=10_000, token_delay_s=0.05))
    client: AgentClient = agent.client
    await client.start(make_spec(model_file))
    info = await _until_state(client, "m", InstanceState.READY)
    resp = await client.session.post(client.proxy_url("m", "/v1/chat/completions"),
                                     json={"messages": [{"role": "user", "content": "go"}], "stream": True})
    first = await resp.content.readline()
    assert first.startswith(b"data: ")
    assert await busy_slots(info) == 1
    resp.close()  # the client goes away mid-generation
    await eventually(lambda: _equals(busy_slots(info), 0), timeout=10, what="the slot to be freed")


async def test_proxy_client_disconnect_while_the_runtime_thinks(start_agent, fake_runtime, model_file) -> None:  # type: ignore[no-untyped-def]
    """No byte has come back yet (a long prompt, a stalled runtime): leaving must still cancel."""
    agent = await start_agent(fake_runtime(stall_after=1))  # answers the agent's build check, then wedges
    client: AgentClient = agent.client
    await client.start(make_spec(model_file))
    info = await _until_state(client, "m", InstanceState.READY)
    request = asyncio.ensure_future(client.session.post(
        client.proxy_url("m", "/v1/chat/completions"), json={"messages": [{"role": "user", "content": "go"}]}))
    await eventually(lambda: _equals(busy_slots(info), 1), what="the request to reach a slot")
    request.cancel()  # the client gives up and closes its connection
    await eventually(lambda: _equals(busy_slots(info), 0), timeout=10, what="the slot to be freed")


async def _equals(value: object, expected: int) -> bool:
    return await value == expected  # type: ignore[misc]


async def busy_slots(info: InstanceInfo) -> int:
    """How many of the runtime's slots are processing, asked of the runtime itself."""
    async with aiohttp.ClientSession() as http, \
            http.get(f"{info.endpoint}/slots", headers={"Authorization": f"Bearer {info.api_key}"}) as resp:
        return sum(s["is_processing"] for s in await resp.json())


async def test_telemetry_reports_instances_and_rates(start_agent, fake_runtime, model_file) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(fake_runtime(tokens=5))
    client: AgentClient = agent.client
    await client.start(make_spec(model_file))
    await _until_state(client, "m", InstanceState.READY)

    async def sample_with(predicate: Callable[[object], bool]) -> object:
        page = await client.telemetry(since=0)
        return next((s for s in reversed(page.samples) if "m" in s.instances and predicate(s.instances["m"])), None)

    sample = await eventually(lambda: sample_with(lambda i: i.slots_total == 4), what="a sample with slots")
    assert sample.gpus == [GPU] and sample.memory_total > 0
    assert sample.instances["m"].rss_bytes > 0
    # The agent's one-token check of this new build was generated before "ready": count from there.
    before = sample.instances["m"]
    assert (before.generation_tokens_total, before.prompt_tokens_total) == (1, 1)
    async with client.session.post(client.proxy_url("m", "/v1/completions"), json={"prompt": "a b c"}) as resp:
        assert resp.status == 200
    sample = await eventually(lambda: sample_with(lambda i: i.generation_tokens_total == 1 + 5), what="counted tokens")
    assert sample.instances["m"].prompt_tokens_total == 1 + 3
    later = await eventually(lambda: sample_with(lambda i: i.generation_tokens_per_s == 0.0), what="a rate")
    page = await client.telemetry(since=later.seq)
    assert page.samples[0].seq == later.seq and page.next_seq > later.seq


async def test_clients_without_the_right_certificate_are_refused(start_agent, tmp_path) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(None)
    anonymous = AgentClient(agent.url, agent.tls.client_context(with_cert=False))
    other_ca = CertificateAuthority.load_or_create(tmp_path / "other-pki", name="Someone else's CA")
    key, cert = other_ca.issue_keypair(tmp_path / "other", "daemon", "daemon", server=False, client=True)
    stranger = AgentClient(agent.url, agent.tls.client_context(cert=cert, key=key))
    for client in (anonymous, stranger):
        try:
            with pytest.raises(AgentError) as refused:
                await client.status()
            assert refused.value.code == "unreachable"
        finally:
            await client.close()
    assert (await agent.client.status()).node_id  # the right certificate still gets in


async def test_a_stopping_agent_answers_the_daemons_long_polls_instead_of_holding_its_exit(
        tmp_path: Path, port_base: int, fake_runtime) -> None:  # type: ignore[no-untyped-def]
    """The daemon holds an instances long-poll open all the time (and a transfers one while a download
    runs): a stop (an upgrade's restart, SIGTERM) answers them with the page as it is, where the runner
    used to wait out its shutdown timeout and then cut them."""
    home = tmp_path / "agent"
    tls = issue_tls(tmp_path, home / "identity")
    deps = build_deps(home, llama_server=fake_runtime(), telemetry_interval_s=0.05, first_port=port_base)
    runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
    client = AgentClient(f"https://127.0.0.1:{port}", tls.client_context())
    try:
        instances, transfers = await client.instances(), await client.transfers()
        polls = asyncio.gather(client.instances(since=instances.version, timeout=60),
                               client.transfers(since=transfers.version, timeout=60))
        assert runner.server is not None
        await eventually(lambda: runner.server.requests_count == 4, what="both polls taken in")
        await runner.cleanup()
        answered, listed = await asyncio.wait_for(polls, 30)
        assert answered.version == instances.version and answered.instances == []
        assert listed.version == transfers.version and listed.transfers == []
    finally:
        await client.close()
