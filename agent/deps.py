"""``AgentDeps``: everything the agent's HTTP app works with, built in one place.

Tests build it around ``tmp_path`` and hand in fakes at the seams (the runtime catalog, the GPU
probe); ``agent.main`` builds it from the command line.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.admission import Admission, AdmissionPolicy, MemoryProbe, PsutilMemoryProbe
from agent.gpu import (
    GpuProbe,
    NvmlProbe,
    RuntimeListedProbe,
    UnifiedMemoryProbe,
    apple_silicon,
)
from agent.identity import AgentIdentity, load_or_create_identity
from agent.manager import InstanceManager
from agent.paths import AgentPaths
from agent.records import ProcessRecords
from agent.rpc.forwards import RpcForwards, peer_client_context
from agent.rpc.servers import RPC_FIRST_PORT, RpcServers
from agent.runtimes.catalog import PreferredBuild, RuntimeCatalog
from agent.runtimes.docker import DEFAULT_SOCKET
from agent.runtimes.drivers import Drivers
from agent.runtimes.llamacpp import FIRST_PORT, LlamaCppDriver
from agent.runtimes.mlx import MlxDriver, MlxPlatform
from agent.runtimes.rollout import LlamaCppBuilds
from agent.runtimes.vllm import DEFAULT_IMAGE, VllmDriver
from agent.services.manager import ServiceManager
from agent.services.platforms import platform_manager
from agent.services.policy import ServicePolicy, own_service_names, read_policy_file
from agent.services.service import HostServices
from agent.sources.service import ModelSources
from agent.telemetry import DEFAULT_INTERVAL_S, TelemetryCollector
from agent.trust import LiveTls
from agent.upgrade import AgentUpgrades

FEATURES = ["llamacpp", "instances-long-poll", "logs-sse", "telemetry", "proxy", "unpair", "upgrade",
            "runtime-builds", "services", "files"]
# Admission and getting models (agent.sources.service).
SOURCES_FEATURES = ["admission", "fit", "gguf-inspect", "downloads-hf", "downloads-url", "imports-ollama",
                    "imports-folder", "transfers-long-poll"]


def agent_version() -> str:
    try:
        return importlib.metadata.version("mirbadllm")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0+unknown"


@dataclass
class AgentDeps:
    paths: AgentPaths
    identity: AgentIdentity
    catalog: RuntimeCatalog
    manager: InstanceManager
    telemetry: TelemetryCollector
    gpu_probe: GpuProbe
    adopt_on_start: bool = True
    features: list[str] = field(default_factory=lambda: FEATURES + SOURCES_FEATURES)
    version: str = field(default_factory=agent_version)
    # Set by the agent's lifecycle: called once ``POST /unpair`` has been answered. None: refused.
    on_unpair: Callable[[], None] | None = None
    sources: ModelSources | None = None  # fit, downloads, imports; None in tests that need none
    upgrades: AgentUpgrades | None = None  # POST /upgrade; None: this agent refuses upgrades
    runtime_builds: LlamaCppBuilds | None = None  # POST /runtimes/llamacpp: rolled-out llama.cpp builds
    rpc: RpcServers | None = None  # /rpc/servers: this node's rpc-servers for models on other nodes (agent.rpc)
    services: HostServices | None = None  # GET /services, POST /services/{name}/{action}: agent.services
    tls: LiveTls | None = None  # set by the lifecycle: POST /trust swaps the TLS of new handshakes (agent.trust)
    # GET /status's system memory: the figure admission and the rpc-servers' grants are held to
    memory_probe: MemoryProbe = field(default_factory=PsutilMemoryProbe)


def build_deps(home: Path, *, llama_server: str | os.PathLike[str] | None = None,
               telemetry_interval_s: float = DEFAULT_INTERVAL_S, gpu_probe: GpuProbe | None = None,
               first_port: int = FIRST_PORT, adopt_on_start: bool = True,
               memory_probe: MemoryProbe | None = None, admission_policy: AdmissionPolicy | None = None,
               allow_private_sources: bool = False, mlx_server: str | os.PathLike[str] | None = None,
               mlx_platform: MlxPlatform | None = None, vllm_image: str = DEFAULT_IMAGE,
               docker_socket: str = DEFAULT_SOCKET, service_manager: ServiceManager | None = None,
               rpc_first_port: int = RPC_FIRST_PORT) -> AgentDeps:
    """The agent's parts for the home directory ``home`` (created where missing)."""
    paths = AgentPaths(Path(home)).ensure()
    identity = load_or_create_identity(paths)
    catalog = RuntimeCatalog(llama_server, preferred=PreferredBuild(paths.runtime_builds_dir))
    nvml = gpu_probe if gpu_probe is not None else NvmlProbe()
    llamacpp = LlamaCppDriver(paths, catalog, rpc_forwards=RpcForwards(lambda: peer_client_context(identity)),
                              driver_version=getattr(nvml, "driver_version", lambda: None))  # NVML's, for CUDA
    # NVIDIA's GPUs from NVML; an AMD or Intel GPU as the build's Vulkan backend lists it (agent.gpu).
    # A probe given to build_deps (a test's, a platform's) is the whole truth as it is.
    probe = gpu_probe if gpu_probe is not None else RuntimeListedProbe(nvml, llamacpp.backends.listed_devices)
    memory = memory_probe or PsutilMemoryProbe()  # one figure: GET /status, admission, the rpc-servers' grants
    admission = Admission(admission_policy or AdmissionPolicy(), memory, probe,
                          models_dir=paths.models_dir, computes_on=llamacpp.computes_on)
    drivers = Drivers(llamacpp, VllmDriver(paths, vllm_image, docker_socket, gpus=nvml.sample),  # vLLM: NVIDIA only
                      MlxDriver(paths, mlx_server, mlx_platform))
    manager = InstanceManager(drivers, ProcessRecords(paths.records_file), first_port, admission=admission)
    builds = LlamaCppBuilds(paths, catalog, llamacpp, lambda: [run.port for run in manager.runs().values()],
                            first_port)
    sources = ModelSources(paths.models_dir, admission, manager.loading, allow_private=allow_private_sources)
    # Apple silicon's unified memory is telemetry's GPU entry only: admission and placement treat that
    # memory as the system's (agent.admission.is_unified), not as a GPU's own
    seen = UnifiedMemoryProbe() if gpu_probe is None and apple_silicon() else probe
    telemetry = TelemetryCollector(manager, seen, telemetry_interval_s, models_dir=paths.models_dir)
    services = HostServices(service_manager or platform_manager(),
                            ServicePolicy(read_policy_file(paths.services_policy_file), own_service_names()))
    rpc = RpcServers(paths, catalog, memory, probe, manager.records, manager.session,
                     lambda: [run.port for run in manager.runs().values()],  # one processes.json, two parts
                     first_port=rpc_first_port)
    return AgentDeps(paths=paths, identity=identity, catalog=catalog, manager=manager, rpc=rpc,
                     telemetry=telemetry, gpu_probe=probe, adopt_on_start=adopt_on_start, sources=sources,
                     runtime_builds=builds, services=services, memory_probe=memory)
