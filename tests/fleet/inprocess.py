"""An agent's whole lifecycle in the test's own event loop, with fakes at the seams (GPU probe)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent import inprocess as agent_inprocess
from agent.api.models import GpuInfo
from agent.api.program import program_version
from daemon.nodes.pairing import Paired, pair
from daemon.pki import CertificateAuthority
from tests.fakes import FakeGpuProbe
from tests.fakes.ports import free_port_block
from tests.fleet.agents import eventually

_LOGGER = logging.getLogger(__name__)


class InProcessAgent(agent_inprocess.InProcessAgent):
    """The product's in-process agent (``agent.inprocess``) with the tests' waits and pairing."""

    async def wait_event(self, kind: str, after: int = 0, **match: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((e for e in self.events[after:] if e["event"] == kind
                         and all(e.get(k) == v for k, v in match.items())), None)

        return await eventually(found, what=f"agent event {kind} {match}")  # type: ignore[no-any-return]

    async def pair_with(self, ca: CertificateAuthority, client_cert_pem: str) -> Paired:
        pairing = await self.wait_event("pairing")
        paired = await pair("127.0.0.1", self.lifecycle.port, pairing["code"], pairing["fingerprint"], ca,
                            client_cert_pem)
        await self.wait_event("listening", paired=True)
        return paired


async def start_inprocess_agent(home: Path, *, name: str = "inproc", llama_server: Path | None = None,
                                gpus: list[GpuInfo] | None = None, first_port: int | None = None,
                                memory_probe: Any = None, service_manager: Any = None, version: str | None = None,
                                **build: Any) -> InProcessAgent:
    """``version``: what the agent reports (the program's by default, as ``mirbadllm agent``); ``build``:
    more of ``agent.deps.build_deps``'s keywords (``docker_socket``...). Its rpc-servers take ports of a
    block of this worker's (two agents of two workers both finding 50052 free raced for it), and so do
    its runtimes unless ``first_port`` says where."""
    build.setdefault("rpc_first_port", free_port_block(10))
    return await InProcessAgent.start(home, name=name, version=version or program_version(), llama_server=llama_server,
                                      telemetry_interval_s=0.2, gpu_probe=FakeGpuProbe(list(gpus or [])),
                                      first_port=free_port_block(20) if first_port is None else first_port, memory_probe=memory_probe,
                                      service_manager=service_manager, **build)


async def pair_online(rd: Any, agent: InProcessAgent) -> str:
    """Pair ``agent`` with ``rd`` (a ``RunningDaemon``) by its last pairing code; its node id once online."""
    pairing = agent.last("pairing")
    node = await rd.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", pairing["code"], pairing["fingerprint"])
    link = rd.daemon.links.get(node.id)
    assert link is not None
    await eventually(lambda: link.online, what="the node online")
    return str(node.id)
