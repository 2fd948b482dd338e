"""Plain-URL downloads never reach loopback, private, link-local or metadata addresses (scenario 11):
after DNS, on every redirect, and when a name answers differently the second time. A listener on
each target counts connections, and must count zero."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from agent.api.client import AgentError
from agent.api.sources import DownloadRequest, TransferState
from agent.sources.fetch import Expected, FetchSettings, fetch_file
from agent.sources.url_guard import SourceRefused, UrlPolicy
from tests.agent._sources_support import SourcesAgent, listener, sources_agent  # noqa: F401
from tests.agent.test_downloads import files_under, finished
from tests.fakes.gguf_files import gguf_bytes
from tests.fakes.listener import CountingListener

Listen = Callable[..., Awaitable[CountingListener]]


class ScriptedResolver(AbstractResolver):
    """Answers each name from a script, one answer per lookup: the second may differ (rebinding)."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = {host: list(answers) for host, answers in script.items()}
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        self.lookups.append(host)
        answers = self.script[host]
        address = answers.pop(0) if len(answers) > 1 else answers[0]
        return [{"hostname": host, "host": address, "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None


@pytest.fixture
async def agent(tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> AsyncIterator[SourcesAgent]:
    async with sources_agent(tmp_path, fake_runtime(), port_base) as running:
        yield running


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("template", [
    "http://127.0.0.1:{port}/admin/x.gguf", "http://127.0.0.2:{port}/x.gguf", "http://0.0.0.0:{port}/x.gguf",
    "http://[::ffff:127.0.0.1]:{port}/x.gguf", "http://evil@127.0.0.1:{port}/x.gguf",
    "http://169.254.169.254/latest/x.gguf", "http://10.0.0.1/x.gguf", "http://192.168.1.1/x.gguf",
    "http://100.64.0.1/x.gguf", "http://[fd00:ec2::254]/x.gguf", "http://224.0.0.1/x.gguf",
    "file:///etc/passwd", "ftp://127.0.0.1/x.gguf",
])
async def test_addresses_that_are_not_public_are_refused_at_once(
        agent: SourcesAgent, listener: Listen, template: str) -> None:  # noqa: F811
    target = await listener()
    url = template.format(port=target.port)
    with pytest.raises(AgentError) as caught:
        await agent.client.download(DownloadRequest(url=url))
    assert (caught.value.status, caught.value.code) == (422, "source_refused")
    assert target.connections == 0 and files_under(agent.models_dir) == []


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
async def test_ipv6_loopback_is_refused(agent: SourcesAgent, listener: Listen) -> None:  # noqa: F811
    target = await listener("::1")
    with pytest.raises(AgentError) as caught:
        await agent.client.download(DownloadRequest(url=f"http://[::1]:{target.port}/x.gguf"))
    assert caught.value.code == "source_refused" and target.connections == 0


@pytest.mark.parametrize("host", ["localhost", "2130706433", "0x7f000001", "127.1"])
async def test_names_that_resolve_to_loopback_are_refused_before_connecting(
        agent: SourcesAgent, listener: Listen, host: str) -> None:  # noqa: F811
    target = await listener()
    started = await agent.client.download(DownloadRequest(url=f"http://{host}:{target.port}/x.gguf"))
    info = await finished(agent.client, started.id)
    assert info.state is TransferState.FAILED and "non-public address" in (info.error or ""), info.error
    assert target.connections == 0


async def test_a_name_that_rebinds_to_loopback_is_caught_at_connect_time(
        agent: SourcesAgent, listener: Listen) -> None:  # noqa: F811
    target = await listener()
    resolver = ScriptedResolver({"rebind.example": ["93.184.216.34", "127.0.0.1"]})
    assert agent.deps.sources is not None
    agent.deps.sources.context.resolver = resolver
    started = await agent.client.download(DownloadRequest(url=f"http://rebind.example:{target.port}/x.gguf"))
    info = await finished(agent.client, started.id)
    assert info.state is TransferState.FAILED and "127.0.0.1" in (info.error or "")
    assert resolver.lookups == ["rebind.example", "rebind.example"] and target.connections == 0


async def test_every_redirect_hop_is_checked_before_it_is_dialled(listener: Listen, tmp_path: Path) -> None:  # noqa: F811
    inner = await listener()
    outer = await listener(redirect_to=f"http://127.0.0.1:{inner.port}/admin/x.gguf")
    # The first hop stands for a public server: its origin is trusted; the hop it points to is not.
    policy = UrlPolicy(trusted=frozenset({("http", "127.0.0.1", outer.port)}))
    with pytest.raises(SourceRefused, match="non-public"):
        await fetch_file(URL(f"{outer.url}/x.gguf"), tmp_path / "x.gguf", Expected(), FetchSettings(policy))
    assert outer.connections == 1 and inner.connections == 0 and not list(tmp_path.iterdir())


async def test_credentials_in_a_url_are_refused_even_where_private_sources_are_allowed() -> None:
    policy = UrlPolicy(allow_private=True)
    assert policy.check_url("https://example.org/x.gguf").scheme == "https"
    with pytest.raises(SourceRefused, match="user name or password"):
        policy.check_url("https://user:pw@example.org/x.gguf")


async def test_with_private_sources_allowed_the_same_listener_is_reached(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int, listener: Listen) -> None:  # noqa: F811
    """The positive control: the counting works, and an operator may allow their own network."""
    target = await listener(body=gguf_bytes())
    async with sources_agent(tmp_path, fake_runtime(), port_base, allow_private_sources=True) as agent:
        started = await agent.client.download(DownloadRequest(url=f"http://localhost:{target.port}/m.gguf"))
        info = await finished(agent.client, started.id)
        assert info.state is TransferState.DONE, info.error
        assert target.connections >= 1 and Path(info.result[0].model_path).name == "m.gguf"
