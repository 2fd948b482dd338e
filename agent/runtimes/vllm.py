"""The vLLM driver (a ``RuntimeDriver``): vLLM's OpenAI server as one Docker container per instance.

The contract with Docker:

- Container ``ss-{instance_id}``, labelled ``mirbadllm.model`` (the instance id),
  ``mirbadllm.served-name``, ``mirbadllm.port`` (the host port), ``mirbadllm.config-hash``
  (``agent.api.vllm.config_hash``: the daemon compares it with the definition's to say "restart
  pending"), ``mirbadllm.budget-gib`` when the spec has a memory budget, and ``mirbadllm.tuning=1``
  on a tuning job's candidate (``LaunchSpec.tuning``).
- State is always Docker's: the run's exit is the container's (``POST /containers/{id}/wait``),
  and an agent that restarts lists the containers by label and adopts the running ones (the same
  container; its key, port, Cmd and hash read back from Docker, not from a file of ours); an
  exited or dead one is reported ``failed`` with its exit code and the last 20 lines of Docker's
  log (``exited``), and kept until the next start (or the failure's acknowledgement) removes it.
- The offer's version is the image's vLLM version: its labels where they name vLLM's
  (``label_version``), else what running the image once printed (``VERSION_PROBE``, in the
  background, cached by image id in ``<home>/vllm-versions.json``), the engine's version beside it.
- Create: the image (pulled first when missing, its progress in the instance log), Cmd =
  ``build_args`` (``vllm serve``'s flags; the image's entrypoint is ``vllm serve``), the key in
  ``VLLM_API_KEY``, 8000/tcp published on ``127.0.0.1:{port}`` only, the model folder bound
  read-only under ``/models``, ``RestartPolicy: no`` (only the agent starts models), ``IpcMode:
  host``, and the GPUs (``DeviceRequests`` for NVIDIA) where this node has NVIDIA GPUs. The memory
  budget becomes ``--gpu-memory-utilization`` (its share of one GPU).
- Stop: ``POST /containers/{id}/stop?t=30`` (vLLM frees its GPU memory on SIGTERM), then delete.
  A container that exits on its own is a failure with its last 20 log lines; the next start of the
  instance removes it.

``launch`` is synchronous (the protocol's): it returns a run whose container is created and
started by a task of its own; anything Docker refuses there ends the run like an exit, with
Docker's message as the last log line. The slow part that can be refused outright, the image, is
``prepare``'s, which the manager awaits before taking a port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from agent.api.launch_policy import PolicyViolation, check_launch
from agent.api.models import GpuInfo, LaunchSpec
from agent.api.runtimes import RuntimeId, RuntimeOffer
from agent.api.vllm import (
    CONTAINER_PORT,
    MODELS_MOUNT,
    VllmSettings,
    build_args,
    config_hash,
)
from agent.logring import LogRing
from agent.paths import AgentPaths
from agent.records import ProcessRecord
from agent.runtimes.docker import (
    DEFAULT_SOCKET,
    DockerClient,
    DockerError,
    DockerUnavailable,
    NotFound,
)
from agent.runtimes.driver import ExitedContainer, Figures, NoRuntime, SpecRejected
from agent.runtimes.process import describe_exit
from agent.runtimes.run import FAILURE_LINES, HEALTH_TIMEOUT, RuntimeRun
from core.json_store import write_json_atomic
from core.tasks import cancel_and_wait

_LOGGER = logging.getLogger(__name__)

RUNTIME = "vllm"
RUNTIME_ID: RuntimeId = "vllm"
RUNTIME_NAME = "vllm"
DEFAULT_IMAGE = "vllm/vllm-openai:latest"
API_KEY_ENV = "VLLM_API_KEY"
NAME_PREFIX = "ss-"
LABEL_MODEL = "mirbadllm.model"
LABEL_SERVED_NAME = "mirbadllm.served-name"
LABEL_PORT = "mirbadllm.port"
LABEL_HASH = "mirbadllm.config-hash"
LABEL_BUDGET = "mirbadllm.budget-gib"
LABEL_TUNING = "mirbadllm.tuning"
STOP_TIMEOUT_S = 30
OFFER_TTL_S = 30.0
LOG_DRAIN_S = 2.0
ADOPT_LOG_TAIL = "200"
SCRAPE_TIMEOUT = aiohttp.ClientTimeout(total=2, connect=1)
NVIDIA_GPUS = [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]
_METRICS = {  # vLLM name -> InstanceSample field; labelled series are summed
    "vllm:num_requests_running": "requests_processing",
    "vllm:num_requests_waiting": "requests_deferred",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
}
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the second before vLLM 0.10


LABEL_VERSION_PROBE = "mirbadllm.version-probe"
VERSIONS_FILE = "vllm-versions.json"
VERSION_PROBE_TIMEOUT_S = 120.0  # importing vllm imports torch: tens of seconds on a cold disk
VERSION_PROBE = ["python3", "-c", "import vllm; print(vllm.__version__)"]
_VERSION_TEXT = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")
# Labels that name the vLLM version an image holds, in the order they are believed. The OCI
# version label only counts on an image that says it is vLLM (title or source): vLLM's own
# Dockerfile sets none, and the one its images carry is inherited from Ubuntu's base (22.04).
VERSION_LABELS = ("ai.vllm.version", "vllm.version", "org.opencontainers.image.version")
_OCI_IDENTITY = ("org.opencontainers.image.title", "org.opencontainers.image.source",
                 "org.opencontainers.image.ref.name")


def label_version(labels: Mapping[str, str] | None) -> str | None:
    """The vLLM version an image's labels name, or None when they name none (see VERSION_LABELS)."""
    labels = labels or {}
    for key in VERSION_LABELS:
        value = str(labels.get(key) or "").strip().removeprefix("v")
        if not value or not _VERSION_TEXT.match(value):
            continue
        if key.startswith("org.opencontainers.") and not any(
                "vllm" in str(labels.get(k) or "").lower() for k in _OCI_IDENTITY):
            continue  # a base image's version (ubuntu 22.04), not vLLM's
        return value
    return None


def probed_version(output: str) -> str | None:
    """The version ``VERSION_PROBE`` printed: its last line that reads as a version."""
    return next((line.strip() for line in reversed(output.splitlines()) if _VERSION_TEXT.match(line.strip())),
                None)


class VersionCache:
    """vLLM versions read by running an image once, by image id, on disk under the agent's home
    (``vllm-versions.json``): {image id: {"version": ...} or {"error": why}}. An image id names
    exactly those bytes, so an entry never goes stale; a failed probe is kept too (it is not
    run again for that image; a new image is a new id)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, dict[str, str]] | None = None

    def _load(self) -> dict[str, dict[str, str]]:
        if self._entries is None:
            try:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                self._entries = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw.items()
                                 if isinstance(v, dict)} if isinstance(raw, dict) else {}
            except (OSError, ValueError, AttributeError):
                self._entries = {}
        return self._entries

    def get(self, image_id: str) -> dict[str, str] | None:
        return self._load().get(image_id)

    def put(self, image_id: str, entry: dict[str, str]) -> None:
        entries = self._load()
        entries[image_id] = entry
        try:
            write_json_atomic(self.path, entries, mode=0o644)
        except OSError as exc:
            _LOGGER.warning("cannot write %s: %s", self.path, exc)


def container_name(instance_id: str) -> str:
    return f"{NAME_PREFIX}{instance_id}"


def parse_labelled(text: str) -> dict[str, list[float]]:
    """A Prometheus text exposition as name -> the values of its label sets (one per engine, model)."""
    values: dict[str, list[float]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name, close = line[:brace], line.find("}", brace)
            rest = line[close + 1:] if close != -1 else ""
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            values.setdefault(name, []).append(float(fields[0]))
        except ValueError:
            continue
    return values


def parse_metrics(text: str) -> Figures:
    """vLLM's ``/metrics`` as ``InstanceSample`` fields (``kv_source`` "metrics" when it has the gauge):
    counts summed over label sets, the KV-cache use their mean (each engine reports its own share)."""
    metrics = parse_labelled(text)
    figures: Figures = {field: sum(metrics[name]) if name in metrics else None for name, field in _METRICS.items()}
    kv = next((metrics[name] for name in _KV if name in metrics), None)
    if kv:
        figures["kv_cache_usage_ratio"] = sum(kv) / len(kv)
        figures["kv_source"] = "metrics"
    return figures


def model_mount(model_path: str, models_dir: Path) -> tuple[str, str]:
    """(host folder, path under ``/models``) for a spec's model folder: an absolute folder is bound
    as ``/models/<its name>``; a relative one is taken under the agent's models folder."""
    host = model_path if os.path.isabs(model_path) else str(models_dir / model_path)
    inner = os.path.basename(os.path.normpath(model_path)) if os.path.isabs(model_path) else model_path
    return os.path.normpath(host), inner.strip("/")


def own_settings(spec: LaunchSpec) -> VllmSettings:
    """The spec's vLLM settings (``LaunchSpec.runtime_settings``); a spec for another runtime is refused."""
    own = spec.runtime_settings
    if not isinstance(own, VllmSettings):
        raise SpecRejected(f"the vLLM driver cannot start a {spec.runtime} launch spec")
    return own


def budget_gib(spec: LaunchSpec) -> float | None:
    return spec.memory_budget_bytes / 2**30 if spec.memory_budget_bytes else None


def create_body(spec: LaunchSpec, image: str, cmd: list[str], port: int, api_key: str,
                host_folder: str, inner: str, hash_: str, nvidia: bool) -> dict[str, Any]:
    """``POST /containers/create``'s body for ``spec``: pure, asserted exactly by tests."""
    labels = {LABEL_MODEL: spec.instance_id, LABEL_SERVED_NAME: spec.served_name, LABEL_PORT: str(port),
              LABEL_HASH: hash_}
    budget = budget_gib(spec)
    if budget is not None:
        labels[LABEL_BUDGET] = f"{budget:g}"
    if spec.tuning:  # a job's candidate: never the model's own container
        labels[LABEL_TUNING] = "1"
    host_config: dict[str, Any] = {
        "PortBindings": {f"{CONTAINER_PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]},
        "Binds": [f"{host_folder}:{MODELS_MOUNT}/{inner}:ro"],
        "RestartPolicy": {"Name": "no"},
        "IpcMode": "host",
    }
    if nvidia:
        host_config["DeviceRequests"] = NVIDIA_GPUS
    env = [*(f"{k}={v}" for k, v in sorted(spec.env.items())), f"{API_KEY_ENV}={api_key}"]  # ours last
    return {"Image": image, "Cmd": cmd, "Env": env, "Labels": labels,
            "ExposedPorts": {f"{CONTAINER_PORT}/tcp": {}}, "HostConfig": host_config}


def _started_at(state: Mapping[str, Any]) -> float:
    raw = str(state.get("StartedAt") or "")
    try:  # Docker's RFC 3339 with nanoseconds: keep microseconds
        head, _, frac = raw.rstrip("Z").partition(".")
        return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
    except ValueError:
        return 0.0


def _env_value(env: Sequence[str], name: str) -> str | None:
    return next((item.split("=", 1)[1] for item in env if item.startswith(name + "=")), None)


def record_from_inspect(info: Mapping[str, Any], startup_timeout_s: float = 120.0) -> ProcessRecord | None:
    """What a container of ours says about itself, as a record; None when it is not ours."""
    config = info.get("Config") or {}
    labels = config.get("Labels") or {}
    instance_id = labels.get(LABEL_MODEL)
    key = _env_value(config.get("Env") or [], API_KEY_ENV)
    try:
        port = int(labels.get(LABEL_PORT, ""))
    except ValueError:
        return None
    if not instance_id or key is None:
        return None
    state = info.get("State") or {}
    cmd = list(config.get("Cmd") or [])
    model = next((cmd[i + 1] for i, arg in enumerate(cmd[:-1]) if arg == "--model"), "")
    return ProcessRecord(instance_id=instance_id, runtime=RUNTIME, pid=int(state.get("Pid") or 0),
                         create_time=_started_at(state), executable=str(config.get("Image") or ""),
                         process_exe=str(info.get("Id") or ""), port=port, api_key=key, argv=cmd,
                         model_path=model, served_name=labels.get(LABEL_SERVED_NAME, ""),
                         config_hash=labels.get(LABEL_HASH, ""), started_at=_started_at(state),
                         startup_timeout_s=startup_timeout_s)


def exit_error(state: Mapping[str, Any], lines: Sequence[str]) -> str:
    """'vllm exited 3: <last line>' from a container's State (its OOM kill and Docker's own error
    said when Docker has them)."""
    code = state.get("ExitCode")
    exit_code = int(code) if isinstance(code, int) else None
    last = next((line.strip() for line in reversed(lines) if line.strip()), "") or "(no output)"
    text = f"{RUNTIME_NAME} {describe_exit(exit_code)}: {last}"
    if state.get("OOMKilled"):
        text += " (the kernel killed it for memory: OOM)"
    if state.get("Error"):
        text += f" (Docker: {state['Error']})"
    if state.get("Status") == "dead":
        text += " (Docker reports the container dead)"
    return text


class ContainerLog:
    """Follows a container's output (``GET /containers/{id}/logs?follow=1``) into a ``LogRing``;
    what ``RuntimeRun`` needs of a log follower (``agent.runtimes.run.RunLog``)."""

    def __init__(self, ring: LogRing) -> None:
        self.ring = ring
        self.first_line = ring.total
        self.last_growth = time.monotonic()
        self.done = asyncio.Event()
        self._partial = ""
        self._task: asyncio.Task[None] | None = None

    def write(self, line: str) -> None:
        """A line of the agent's own (pull progress, Docker's refusal) in the instance's log."""
        self.ring.append([line])
        self.last_growth = time.monotonic()

    def follow(self, client: DockerClient, container: str, tail: str = "all") -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(client, container, tail),
                                                                name=f"logs {container}")

    async def _run(self, client: DockerClient, container: str, tail: str) -> None:
        try:
            async for chunk in client.logs(container, follow=True, tail=tail):
                self.last_growth = time.monotonic()
                lines = (self._partial + chunk.decode("utf-8", "replace")).split("\n")
                self._partial = lines.pop()
                self.ring.append([line.rstrip("\r") for line in lines])
        except DockerError as exc:
            _LOGGER.info("log stream of %s ended: %s", container, exc)
        finally:
            self.flush()
            self.done.set()

    def start(self) -> None:
        """Following starts once the container exists (``follow``)."""

    def read_available(self) -> int:
        return 0  # the stream pushes; nothing to pull

    def flush(self) -> None:
        if self._partial:
            self.ring.append([self._partial.rstrip("\r")])
            self._partial = ""

    def lines(self, count: int) -> list[str]:
        return self.ring.since(self.first_line)[-count:] if count > 0 else []

    async def drain(self, timeout: float = LOG_DRAIN_S) -> None:
        """Wait (briefly) for the stream to end after the container stopped."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), timeout)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)


class ContainerProcess:
    """A container as the process-like handle ``RuntimeRun`` drives (``agent.runtimes.run.RunProcess``):
    its exit is Docker's ``wait``, its stop is Docker's stop then delete."""

    def __init__(self, client: DockerClient, name: str, log: ContainerLog, image: str,
                 stop_timeout_s: int = STOP_TIMEOUT_S) -> None:
        self.client = client
        self.name = name
        self.log = log
        self.image = image
        self.stop_timeout_s = stop_timeout_s
        self.container_id: str | None = None
        self.pid = 0
        self.create_time = 0.0
        self._exited = asyncio.Event()
        self._returncode: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._deleted = False

    @property
    def adopted(self) -> bool:
        return False

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def create(self, body: Mapping[str, Any]) -> None:
        """Remove a stale ``ss-{id}``, create and start the container, then wait for its exit (a task)."""
        self._task = asyncio.get_running_loop().create_task(self._create_and_wait(dict(body)),
                                                            name=f"container {self.name}")

    def attach(self, info: Mapping[str, Any]) -> None:
        """Watch a container that already runs (adoption)."""
        self._take(info)
        self._task = asyncio.get_running_loop().create_task(self._wait(), name=f"container {self.name}")

    def _take(self, info: Mapping[str, Any]) -> None:
        state = info.get("State") or {}
        self.container_id = str(info["Id"])
        self.pid = int(state.get("Pid") or 0)
        self.create_time = _started_at(state)

    async def _create_and_wait(self, body: dict[str, Any]) -> None:
        try:
            with contextlib.suppress(NotFound):
                await self.client.delete(self.name, force=True)  # an earlier run's exited container
            container = await self.client.create(self.name, body)
            await self.client.start(container)
            self.log.follow(self.client, container)  # from its first line (a created one would end at once)
            self._take(await self.client.inspect(container))
        except DockerError as exc:
            self.log.write(f"cannot run the vLLM container: {exc}")
            self._exited.set()
            return
        await self._wait()

    async def _wait(self) -> None:
        assert self.container_id is not None
        try:
            self._returncode = await self.client.wait(self.container_id)
        except DockerError as exc:
            _LOGGER.warning("lost sight of container %s: %s", self.name, exc)
        self._exited.set()

    def poll(self) -> bool:
        return self._exited.is_set()

    async def wait(self) -> int | None:
        await self._exited.wait()
        await self.log.drain()
        return self._returncode

    def executable(self) -> str | None:
        return None

    def psutil_handle(self) -> psutil.Process | None:
        if self.poll() or not self.pid:
            return None
        try:
            return psutil.Process(self.pid)
        except psutil.Error:
            return None

    async def terminate(self, timeout: float) -> int | None:
        """Docker's stop (SIGTERM, SIGKILL after at least ``stop_timeout_s``), then delete."""
        if self._task is not None and not self.poll() and self.container_id is None:
            self._task.cancel()  # still being created: stop creating, then remove what exists
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._exited.set()
        target = self.container_id or self.name
        try:
            await self.client.stop(target, max(self.stop_timeout_s, math.ceil(timeout)))
        except NotFound:
            pass
        except DockerError as exc:
            _LOGGER.warning("docker stop %s: %s", self.name, exc)
        if self.container_id is not None:
            await self.wait()
        await self.delete()
        return self._returncode

    async def delete(self) -> None:
        if self._deleted:
            return
        try:
            await self.client.delete(self.container_id or self.name, force=True)
        except NotFound:
            pass
        except DockerError as exc:
            _LOGGER.warning("docker rm %s: %s", self.name, exc)
        self._deleted = True

    def detach(self) -> None:
        """Stop watching (the agent goes away); the container keeps serving."""
        if self._task is not None:
            self._task.cancel()


def offer_unavailable(reason: str, image: str) -> RuntimeOffer:
    return RuntimeOffer(runtime=RUNTIME_ID, available=False, location=image, reason=reason)


class VllmDriver:
    """Starts and adopts vLLM containers on one Docker engine: a ``RuntimeDriver``."""

    runtime = RUNTIME
    runtime_name = RUNTIME_NAME

    def __init__(self, paths: AgentPaths, image: str = DEFAULT_IMAGE, socket: str = DEFAULT_SOCKET,
                 gpus: Callable[[], Sequence[GpuInfo]] | None = None, client: DockerClient | None = None,
                 stop_timeout_s: int = STOP_TIMEOUT_S, platform: str = sys.platform,
                 version_probe: Sequence[str] = VERSION_PROBE,
                 version_timeout_s: float = VERSION_PROBE_TIMEOUT_S) -> None:
        self.paths = paths
        self.image = image
        self.socket = socket
        self.client = client if client is not None else DockerClient(socket)
        self._gpus = gpus if gpus is not None else (list)
        self.stop_timeout_s = stop_timeout_s
        self.platform = platform
        self.version_probe = list(version_probe)
        self.version_timeout_s = version_timeout_s
        self.versions = VersionCache(paths.home / VERSIONS_FILE)
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._offer: tuple[float, RuntimeOffer] | None = None

    # -- what this node offers -------------------------------------------------------------------

    async def offer(self) -> RuntimeOffer:
        """Available when the engine answers: the image's vLLM version (its labels, else what running
        it once printed, cached by image id; ``reason`` says why when it is not known yet), the
        engine's version beside it, and the image's digest when the image is here."""
        now = time.monotonic()
        if self._offer is not None and now - self._offer[0] < OFFER_TTL_S:
            return self._offer[1]
        offer = await self._probe()
        self._offer = (now, offer)
        return offer

    async def _probe(self) -> RuntimeOffer:
        if self.platform != "linux":
            return offer_unavailable("vLLM containers run on Linux nodes only", self.image)
        if not os.path.exists(self.socket):
            return offer_unavailable(f"no Docker engine here: {self.socket} does not exist", self.image)
        if not os.access(self.socket, os.R_OK | os.W_OK):
            return offer_unavailable(f"the agent may not use the Docker engine ({self.socket}: permission "
                                     "denied; add its user to the docker group)", self.image)
        try:
            engine = await self.client.version()
        except DockerError as exc:
            return offer_unavailable(str(exc), self.image)
        docker = f"Docker {engine.get('Version', '?')}"
        digest: str | None = None
        try:
            image = await self.client.image(self.image)
        except DockerError:  # pulled at the first start
            return RuntimeOffer(runtime=RUNTIME_ID, available=True, location=self.image,
                                reason=f"vLLM version unknown: {self.image} is not on this node yet "
                                       f"(pulled at the first start); {docker}")
        digests = image.get("RepoDigests") or []
        image_id = str(image.get("Id") or "")
        digest = str(digests[0]).split("@", 1)[-1] if digests else image_id or None
        version, why = self._image_version(image_id, (image.get("Config") or {}).get("Labels"))
        if version is None:
            return RuntimeOffer(runtime=RUNTIME_ID, available=True, digest=digest, location=self.image,
                                reason=f"vLLM version unknown: {why}; {docker}")
        return RuntimeOffer(runtime=RUNTIME_ID, available=True, version=f"{version} ({docker})",
                            digest=digest, location=self.image)

    def _image_version(self, image_id: str, labels: Mapping[str, str] | None) -> tuple[str | None, str]:
        """(version, why not): from the labels, else from the cache of probes, else a probe is
        started in the background (never awaited here: this is the status path)."""
        found = label_version(labels)
        if found is not None:
            return found, ""
        if not image_id:
            return None, "the engine gave no image id"
        entry = self.versions.get(image_id)
        if entry is not None:
            return entry.get("version"), entry.get("error", "")
        task = self._probes.get(image_id)
        if task is None or task.done():
            self._probes[image_id] = asyncio.get_running_loop().create_task(
                self._probe_version(image_id), name=f"vllm version {image_id[:19]}")
        return None, "reading it from the image (running it once)"

    async def _probe_version(self, image_id: str) -> None:
        """Run the image once with ``VERSION_PROBE`` as its entrypoint (no network, bounded by
        ``version_timeout_s``) and remember what it printed, or why it printed no version."""
        name = f"mirbadllm-vllm-version-{image_id.removeprefix('sha256:')[:12]}"
        body = {"Image": image_id, "Entrypoint": list(self.version_probe), "Cmd": [],
                "Labels": {LABEL_VERSION_PROBE: "1"}, "Env": ["VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1"],
                "HostConfig": {"NetworkMode": "none", "RestartPolicy": {"Name": "no"}}}
        entry: dict[str, str]
        try:
            with contextlib.suppress(NotFound):
                await self.client.delete(name, force=True)
            container = await self.client.create(name, body)
            await self.client.start(container)
            code = await asyncio.wait_for(self.client.wait(container), self.version_timeout_s)
            output = "\n".join(await self.last_log_lines(container, 50))
            version = probed_version(output) if code == 0 else None
            last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "(no output)")
            entry = {"version": version} if version else {
                "error": f"the image printed no vLLM version ({describe_exit(code)}: {last[:200]})"}
        except TimeoutError:
            entry = {"error": f"the image did not say its vLLM version within {self.version_timeout_s:g} s"}
        except DockerError as exc:
            _LOGGER.info("cannot run %s for its vLLM version: %s", image_id, exc)
            return  # the engine's trouble, not the image's: asked again at a later offer
        finally:
            with contextlib.suppress(DockerError):
                await self.client.delete(name, force=True)
        _LOGGER.info("vLLM version of %s: %s", image_id, entry)
        self.versions.put(image_id, entry)
        self._offer = None  # the next offer says it

    # -- the command and the checks --------------------------------------------------------------

    def image_for(self, spec: LaunchSpec) -> str:
        return spec.image or self.image

    def _nvidia(self) -> bool:
        """NVIDIA GPUs here (the probe is NVML's: any GPU it lists is one)."""
        return bool(list(self._gpus()))

    def _total_gib(self) -> float | None:
        gpus = list(self._gpus())
        totals = [g.memory_total for g in gpus if g.memory_total]
        return min(totals) / 2**30 if totals else None

    def build_command(self, spec: LaunchSpec, port: int) -> list[str]:
        """``vllm serve``'s flags for ``spec`` (the port is Docker's mapping, not a flag)."""
        del port
        _, inner = model_mount(spec.model_path, self.paths.models_dir)
        total = self._total_gib()
        budget = budget_gib(spec)
        return build_args(own_settings(spec), inner, spec.served_name, list(spec.extra_args),
                          budget if total is not None else None, total)

    def config_hash(self, spec: LaunchSpec) -> str:
        return config_hash(self.image_for(spec), own_settings(spec), spec.model_path, spec.served_name,
                           list(spec.extra_args), budget_gib(spec))

    def check(self, spec: LaunchSpec) -> None:
        if self.platform != "linux":
            raise NoRuntime("vLLM containers run on Linux nodes only")
        try:
            check_launch(RUNTIME, spec.extra_args, spec.env, spec.model_path, vllm_settings=own_settings(spec))
        except PolicyViolation as exc:
            raise SpecRejected(str(exc)) from exc
        host, _ = model_mount(spec.model_path, self.paths.models_dir)
        if not os.path.isdir(host):
            raise SpecRejected(f"vLLM needs a model folder; not found on this node: {spec.model_path}")
        try:
            self.build_command(spec, 0)
        except ValueError as exc:
            raise SpecRejected(str(exc)) from exc

    async def prepare(self, spec: LaunchSpec, ring: LogRing) -> None:
        """The image is here, or pulled now (progress in the instance log); else ``NoRuntime``."""
        image = self.image_for(spec)
        try:
            await self.client.image(image)
            return
        except NotFound:
            pass
        except DockerUnavailable as exc:
            raise NoRuntime(str(exc)) from exc
        except DockerError as exc:
            raise NoRuntime(f"cannot inspect image {image}: {exc}") from exc
        ring.append([f"pulling {image} (it is not on this node yet)"])
        last = ""
        try:
            async for progress in self.client.pull(image):
                line = " ".join(str(progress.get(k)) for k in ("id", "status", "progress") if progress.get(k))
                if line and line != last:
                    ring.append([line])
                    last = line
        except DockerError as exc:
            ring.append([f"cannot pull {image}: {exc}"])
            raise NoRuntime(f"image {image} is not on this node and cannot be pulled: {exc}") from exc
        self._offer = None  # the digest is known now

    # -- runs ------------------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec, port: int, ring: LogRing) -> RuntimeRun:
        self.check(spec)
        image = self.image_for(spec)
        cmd = self.build_command(spec, port)
        api_key = secrets.token_urlsafe(32)
        host, inner = model_mount(spec.model_path, self.paths.models_dir)
        hash_ = self.config_hash(spec)
        body = create_body(spec, image, cmd, port, api_key, host, inner, hash_, nvidia=self._nvidia())
        log = ContainerLog(ring)
        process = ContainerProcess(self.client, container_name(spec.instance_id), log, image, self.stop_timeout_s)
        process.create(body)
        _LOGGER.info("starting container %s for %s on port %d", process.name, spec.instance_id, port)
        record = ProcessRecord(instance_id=spec.instance_id, runtime=RUNTIME, pid=0, create_time=0.0,
                               executable=image, port=port, api_key=api_key, argv=cmd,
                               model_path=spec.model_path, served_name=spec.served_name, config_hash=hash_,
                               started_at=time.time(), startup_timeout_s=spec.startup_timeout_s)
        return RuntimeRun(RUNTIME_NAME, process, record, log)

    async def discover(self) -> list[ProcessRecord]:
        """The running containers of ours on this engine (by label), as records to adopt."""
        records = [record_from_inspect(info) for info in await self._ours_in(("running",))]
        return [record for record in records if record is not None]

    async def _ours_in(self, states: tuple[str, ...]) -> list[dict[str, Any]]:
        """Docker's inspection of each container of ours (by label) in one of ``states``; [] when the
        engine cannot list them, and a container gone before its inspection left out."""
        try:
            found = await self.client.containers(LABEL_MODEL)
        except DockerError as exc:
            _LOGGER.info("cannot list vLLM containers: %s", exc)
            return []
        inspected: list[dict[str, Any]] = []
        for item in found:
            if item.get("State") in states:
                with contextlib.suppress(DockerError):
                    inspected.append(await self.client.inspect(str(item["Id"])))
        return inspected

    async def exited(self) -> list[ExitedContainer]:
        """The containers of ours that exited (or died) with no agent watching: each instance is
        reported ``failed`` with its exit code and the last lines of Docker's log; the container
        stays (``docker logs`` still has it) until the instance is started again or acknowledged."""
        result: list[ExitedContainer] = []
        for info in await self._ours_in(("exited", "dead")):
            record = record_from_inspect(info)
            if record is None or str(info.get("Name") or "").lstrip("/") != container_name(record.instance_id):
                continue  # not an instance's own ss-{id} (a stray copy): not ours to report
            lines = await self.last_log_lines(str(info["Id"]))
            state = info.get("State") or {}
            code = state.get("ExitCode")
            result.append(ExitedContainer(record, int(code) if isinstance(code, int) else None, lines,
                                          exit_error(state, lines)))
        return result

    async def last_log_lines(self, container: str, count: int = FAILURE_LINES) -> list[str]:
        """The last ``count`` lines Docker kept of a container's output ([] when it has none)."""
        text = ""
        try:
            async for chunk in self.client.logs(container, follow=False, tail=str(count)):
                text += chunk.decode("utf-8", "replace")
        except DockerError as exc:
            _LOGGER.info("no logs of %s: %s", container, exc)
        return [line.rstrip("\r") for line in text.splitlines()][-count:]

    async def discard(self, instance_id: str) -> None:
        """Remove the instance's ``ss-{id}`` when it no longer runs (a failure acknowledged)."""
        try:
            info = await self.client.inspect(container_name(instance_id))
            if (info.get("State") or {}).get("Running") or LABEL_MODEL not in ((info.get("Config") or {})
                                                                                 .get("Labels") or {}):
                return
            await self.client.delete(str(info["Id"]), force=True)
        except NotFound:
            pass
        except DockerError as exc:
            _LOGGER.info("cannot remove the exited container of %s: %s", instance_id, exc)

    async def adopt(self, record: ProcessRecord, ring: LogRing) -> RuntimeRun | None:
        """The running ``ss-{id}`` of this instance, with what Docker says of it; None when gone."""
        try:
            info = await self.client.inspect(container_name(record.instance_id))
        except DockerError as exc:
            _LOGGER.info("record %s: no container to adopt (%s)", record.instance_id, exc)
            return None
        fresh = record_from_inspect(info, record.startup_timeout_s)
        if fresh is None or fresh.instance_id != record.instance_id or not (info.get("State") or {}).get("Running"):
            return None
        log = ContainerLog(ring)
        process = ContainerProcess(self.client, container_name(record.instance_id), log, fresh.executable,
                                   self.stop_timeout_s)
        log.follow(self.client, str(info["Id"]), tail=ADOPT_LOG_TAIL)
        process.attach(info)
        _LOGGER.info("adopted container %s for %s: port %d", process.name, record.instance_id, fresh.port)
        fresh.model_path = record.model_path or fresh.model_path
        return RuntimeRun(RUNTIME_NAME, process, fresh, log, adopted=True)

    async def wait_ready(self, run: RuntimeRun, session: aiohttp.ClientSession,
                         startup_timeout_s: float) -> None:
        await run.wait_ready(session, startup_timeout_s, serves)

    def parse_metrics(self, text: str) -> Figures:
        return parse_metrics(text)

    async def scrape(self, run: RuntimeRun, session: aiohttp.ClientSession) -> Figures:
        try:
            async with session.get(f"{run.endpoint}/metrics", headers=run.auth_headers(),
                                   timeout=SCRAPE_TIMEOUT) as resp:
                if resp.status == 200:
                    return self.parse_metrics(await resp.text())
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            _LOGGER.debug("cannot scrape %s: %s", run.endpoint, exc)
        return {}

    async def version_probes(self) -> None:
        """Wait for the version probes in flight (tests; ``close``)."""
        for task in list(self._probes.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        for task in self._probes.values():
            task.cancel()
        await self.version_probes()
        await self.client.close()


async def serves(run: RuntimeRun, session: aiohttp.ClientSession) -> bool:
    """vLLM's "ready": ``/health`` says 200 and ``/v1/models`` answers our key (a server on the
    port that is not this instance's would refuse it)."""
    try:
        async with session.get(f"{run.endpoint}/health", timeout=HEALTH_TIMEOUT) as resp:
            if resp.status != 200:
                return False
        async with session.get(f"{run.endpoint}/v1/models", headers=run.auth_headers(),
                               timeout=HEALTH_TIMEOUT) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False
