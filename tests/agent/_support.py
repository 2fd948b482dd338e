"""Helpers for the agent tests: waiting on a condition, specs, TLS material."""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agent.api.models import LaunchSpec
from daemon.pki import CertificateAuthority

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")


async def eventually(probe: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05,
                     what: str = "condition") -> Any:
    """Re-evaluate ``probe`` (sync or async) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {last!r}")
        await asyncio.sleep(interval)


def make_spec(model: Path, instance_id: str = "m", **kw: Any) -> LaunchSpec:
    return LaunchSpec(instance_id=instance_id, model_path=str(model), served_name=kw.pop("served_name", instance_id),
                      **kw)


@dataclass
class TlsMaterial:
    ca: CertificateAuthority
    ca_file: Path
    client_cert: Path
    client_key: Path

    def client_context(self, cert: Path | None = None, key: Path | None = None,
                       with_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if with_cert:
            ctx.load_cert_chain(str(cert or self.client_cert), str(key or self.client_key))
        return ctx


def issue_tls(tmp: Path, agent_identity_dir: Path) -> TlsMaterial:
    """A CA; an agent certificate (server) in ``agent_identity_dir`` with ca.crt; a daemon client cert."""
    ca = CertificateAuthority.load_or_create(tmp / "pki")
    agent_identity_dir.mkdir(parents=True, exist_ok=True)
    ca.issue_keypair(agent_identity_dir, "agent", "agent-under-test", server=True, client=False,
                     hosts=["127.0.0.1", "localhost"])
    (agent_identity_dir / "ca.crt").write_bytes((tmp / "pki" / "ca.crt").read_bytes())
    key, cert = ca.issue_keypair(tmp / "client", "daemon", "daemon", server=False, client=True)
    return TlsMaterial(ca=ca, ca_file=tmp / "pki" / "ca.crt", client_cert=cert, client_key=key)


async def wait_async(awaitable: Awaitable[T], timeout: float = 15.0) -> T:
    return await asyncio.wait_for(awaitable, timeout)
