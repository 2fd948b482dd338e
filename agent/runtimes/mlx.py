"""The MLX driver (a ``RuntimeDriver``): ``mlx_lm.server`` on a Mac with Apple Silicon.

Where it is: the path the agent was given (``--mlx-server``), else the runtime environment under
the agent home (``<home>/runtimes/mlx``, a Python virtual environment with mlx-lm installed:
``python3 -m venv <home>/runtimes/mlx && <home>/runtimes/mlx/bin/pip install mlx-lm``), else
``mlx_lm.server`` on ``PATH``. Always an executable (mlx-lm's console script), so the argv is
``[exe] + build_command(spec, port)`` as for llama.cpp, and adoption after an agent restart works
the same way (PID, creation time, and the interpreter the kernel reports once it ran). The version
offered is mlx-lm's, asked of the interpreter on the script's ``#!`` line.

mlx_lm.server loads whatever model a request names, so it is started with ``--model`` set to the
served name, which the instance's working folder (``<home>/runtimes/mlx-instances/<hash>``) links to
the model's folder: a request for the served name finds the loaded model (see ``agent.api.mlx``).
Its environment keeps the Hugging Face libraries offline (``HF_HUB_OFFLINE``), so a request that
names another model, adapter or draft model cannot make the node download one.

It has no API key: it listens on 127.0.0.1 only, and the agent's proxy is the way in from the
network. It has no ``/health`` (older releases) and no ``/metrics``: it is ready when
``/v1/models`` lists the model's folder (it binds its port only once the model is loaded), or, for
a release that does not list it, when a one-token completion for the served name answers. Its
telemetry is what the process says (RSS, CPU; the collector reads those for every run); request
and KV-cache figures are left out, not made up.

Off macOS on arm64 it is offered as unavailable with the reason; ``MlxPlatform`` is the seam the
tests set to darwin/arm64 to run the driver on Linux against a fake server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import platform as platform_module
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from agent.api.launch_policy import (
    PolicyViolation,
    check_env,
    check_extra_args,
    check_mlx_settings,
)
from agent.api.mlx import (
    MlxSettings,
    build_args,
    config_hash,
    lift_extra_args,
    served_name_problem,
)
from agent.api.models import LaunchSpec
from agent.api.runtimes import RuntimeOffer
from agent.logring import LogRing, LogTailer
from agent.paths import AgentPaths
from agent.records import ProcessRecord
from agent.runtimes.driver import Figures, NoRuntime, SpecRejected
from agent.runtimes.llamacpp import BASE_ENV_KEYS, real_inside
from agent.runtimes.process import RuntimeProcess
from agent.runtimes.run import HEALTH_TIMEOUT, RuntimeRun, adopt_recorded
from core.safe_names import UnsafeName, check_node_path, commonpath_inside

_LOGGER = logging.getLogger(__name__)

RUNTIME = "mlx"
RUNTIME_NAME = "mlx_lm.server"
EXECUTABLE = "mlx_lm.server"
NOT_APPLE_SILICON = "MLX needs a Mac with Apple Silicon"
NOT_FOUND = ("no mlx_lm.server found: install mlx-lm into the agent's runtime environment "
             "(python3 -m venv {env} && {env}/bin/pip install mlx-lm), put mlx_lm.server on PATH, "
             "or start the agent with --mlx-server PATH")
VERSION_TIMEOUT_S = 20.0
GENERATE_TIMEOUT = aiohttp.ClientTimeout(total=10, connect=1)
# The child's environment on top of the base: no downloads, whatever a request names.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
_VERSION_CODE = "import importlib.metadata as m; print(m.version('mlx-lm'))"


@dataclass(frozen=True)
class MlxPlatform:
    """The OS and CPU the driver believes it runs on (``sys.platform``, ``platform.machine()``)."""

    system: str
    machine: str

    @classmethod
    def here(cls) -> MlxPlatform:
        return cls(sys.platform, platform_module.machine())

    @property
    def apple_silicon(self) -> bool:
        return self.system == "darwin" and self.machine == "arm64"


def runtime_env_dir(paths: AgentPaths) -> Path:
    """The agent's own MLX runtime environment (a Python venv with mlx-lm)."""
    return paths.home / "runtimes" / "mlx"


def find_mlx_server(configured: Path | None, env_dir: Path, environ: Mapping[str, str]) -> Path | None:
    """The configured path, else the runtime environment's ``bin/mlx_lm.server``, else ``PATH``'s."""
    if configured is not None:
        return configured if os.access(configured, os.X_OK) and configured.is_file() else None
    own = env_dir / "bin" / EXECUTABLE
    if os.access(own, os.X_OK) and own.is_file():
        return own
    found = shutil.which(EXECUTABLE, path=environ.get("PATH", ""))
    return Path(found) if found else None


def interpreter_of(script: Path) -> list[str] | None:
    """The ``#!`` line of a console script as an argv (``/usr/bin/env python3`` included)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = shlex.split(first[2:].decode(errors="replace").strip())
    return words or None


def mlx_lm_version(script: Path) -> str | None:
    """mlx-lm's version, as the script's own interpreter has it installed; None when it cannot say."""
    interpreter = interpreter_of(script)
    if interpreter is None:
        return None
    try:
        done = subprocess.run([*interpreter, "-c", _VERSION_CODE], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        _LOGGER.info("cannot ask %s for mlx-lm's version: %s", script, exc)
        return None
    version = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
    return version if version and len(version) <= 64 and " " not in version else None


def link_parts(served_name: str) -> list[str]:
    """The served name as the relative path the working folder links to the model; refused when
    it cannot be one (mlx_lm.server reads ``--model`` as a path)."""
    problem = served_name_problem(served_name)
    if problem is not None:
        raise SpecRejected(problem)
    return served_name.split("/")


def check_model_folder(model_path: str, models_dir: Path | None) -> None:
    """An absolute path to an MLX model folder (``config.json`` in it); one under the agent's models
    folder must not link out of it."""
    try:
        check_node_path(model_path)
    except UnsafeName as exc:
        raise SpecRejected(str(exc)) from exc
    if not os.path.isdir(model_path):
        raise SpecRejected(f"MLX model folder not found on this node: {model_path} (MLX runs a folder of "
                           "safetensors with its config.json, not a GGUF file)")
    if not os.path.isfile(os.path.join(model_path, "config.json")):
        raise SpecRejected(f"{model_path} has no config.json: it is not an MLX model folder")
    if models_dir is not None:
        root = os.path.abspath(models_dir)
        if commonpath_inside(root, os.path.abspath(model_path)) and not real_inside(str(models_dir), model_path):
            raise SpecRejected(f"model folder {model_path} is a link that leads out of the models folder")


def own_settings(spec: LaunchSpec) -> MlxSettings:
    """The spec's MLX settings (``LaunchSpec.runtime_settings``); a spec for another runtime is refused."""
    own = spec.runtime_settings
    if not isinstance(own, MlxSettings):
        raise SpecRejected(f"the MLX driver cannot start a {spec.runtime} launch spec")
    return own


def check_spec(spec: LaunchSpec, models_dir: Path | None = None) -> None:
    """Refuse an MLX spec that could never start, or reaches beyond its model, before a spawn."""
    try:
        check_env(spec.env)
        check_extra_args(spec.extra_args, spec.model_path, inside=real_inside, runtime="mlx")
        check_mlx_settings(own_settings(spec), spec.model_path, inside=real_inside)
    except PolicyViolation as exc:
        raise SpecRejected(str(exc)) from exc
    try:
        lift_extra_args(own_settings(spec), list(spec.extra_args))
    except ValueError as exc:
        raise SpecRejected(f"extra_args: {exc}") from exc
    link_parts(spec.served_name)
    check_model_folder(spec.model_path, models_dir)


def child_env(spec_env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The base of the agent's environment, the spec's allowed variables, and offline switches."""
    source = os.environ if environ is None else environ
    env = {key: source[key] for key in BASE_ENV_KEYS if key in source}
    env.update(spec_env)
    env.update(OFFLINE_ENV)
    return env


def build_command(spec: LaunchSpec, port: int) -> list[str]:
    """mlx_lm.server's argv after the executable for ``spec`` on ``port``: pure, golden-tested."""
    return build_args(own_settings(spec), spec.model_path, spec.served_name, port, spec.extra_args)


def _model_ids(body: object) -> list[str] | None:
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    return [m["id"] for m in body["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]


async def serves(run: RuntimeRun, session: aiohttp.ClientSession) -> bool:
    """mlx_lm.server's "ready": ``/v1/models`` lists our model's folder, or (a release that lists
    only the Hugging Face cache) a one-token completion for the served name answers."""
    try:
        async with session.get(f"{run.endpoint}/v1/models", timeout=HEALTH_TIMEOUT) as resp:
            if resp.status != 200:
                return False
            ids = _model_ids(await resp.json(content_type=None))
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    if ids is None:
        return False
    if os.path.realpath(run.record.model_path) in ids or run.record.served_name in ids:
        return True
    try:
        async with session.post(f"{run.endpoint}/v1/completions", timeout=GENERATE_TIMEOUT,
                                json={"model": run.record.served_name, "prompt": "Hello", "max_tokens": 1,
                                      "temperature": 0}) as resp:
            body = await resp.json(content_type=None)
            return resp.status == 200 and isinstance(body, dict) and bool(body.get("choices"))
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False


def link_model(workdir: Path, served_name: str, model_path: str) -> None:
    """Make ``workdir`` hold only the link ``<served_name>`` -> ``model_path`` (afresh each start)."""
    if workdir.exists():
        shutil.rmtree(workdir)  # links and folders the agent made; rmtree never follows a link
    parts = link_parts(served_name)
    link = workdir.joinpath(*parts)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(model_path, target_is_directory=True)


class MlxDriver:
    """Starts and adopts ``mlx_lm.server`` processes for one agent home: a ``RuntimeDriver``."""

    runtime = RUNTIME
    runtime_name = RUNTIME_NAME

    def __init__(self, paths: AgentPaths, mlx_server: str | os.PathLike[str] | None = None,
                 platform: MlxPlatform | None = None, environ: Mapping[str, str] | None = None,
                 version_of: Callable[[Path], str | None] = mlx_lm_version) -> None:
        self.paths = paths
        self.configured = Path(mlx_server) if mlx_server is not None else None
        self.platform = platform if platform is not None else MlxPlatform.here()
        self.environ = os.environ if environ is None else environ
        self.version_of = version_of
        self._versions: dict[tuple[str, float], str | None] = {}

    def find(self) -> Path | None:
        return find_mlx_server(self.configured, runtime_env_dir(self.paths), self.environ)

    def executable(self) -> Path:
        if not self.platform.apple_silicon:
            raise NoRuntime(NOT_APPLE_SILICON)
        exe = self.find()
        if exe is None:
            raise NoRuntime(NOT_FOUND.format(env=runtime_env_dir(self.paths)))
        return exe

    async def offer(self) -> RuntimeOffer:
        if not self.platform.apple_silicon:
            return RuntimeOffer(runtime="mlx", available=False, reason=NOT_APPLE_SILICON)
        exe = self.find()
        if exe is None:
            return RuntimeOffer(runtime="mlx", available=False,
                                reason=NOT_FOUND.format(env=runtime_env_dir(self.paths)))
        try:
            key = (str(exe), exe.stat().st_mtime)
        except OSError:
            key = (str(exe), 0.0)
        if key not in self._versions:  # asked once per script (a subprocess: slow for a status probe)
            self._versions[key] = await asyncio.to_thread(self.version_of, exe)
        return RuntimeOffer(runtime="mlx", available=True, version=self._versions[key], location=str(exe))

    def build_command(self, spec: LaunchSpec, port: int) -> list[str]:
        return build_command(spec, port)

    def check(self, spec: LaunchSpec) -> None:
        self.executable()
        check_spec(spec)

    def workdir(self, instance_id: str) -> Path:
        name = hashlib.sha256(instance_id.encode()).hexdigest()[:16]
        return self.paths.home / "runtimes" / "mlx-instances" / name

    def launch(self, spec: LaunchSpec, port: int, ring: LogRing) -> RuntimeRun:
        """Spawn mlx_lm.server for ``spec`` on ``port``; readiness is ``wait_ready``'s."""
        exe = self.executable()
        check_spec(spec, self.paths.models_dir)
        workdir = self.workdir(spec.instance_id)
        link_model(workdir, spec.served_name, spec.model_path)
        argv = [str(exe)] + self.build_command(spec, port)
        env = child_env(spec.env, self.environ)
        log_path = self.paths.instance_log(spec.instance_id)
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        if log_path.exists():  # keep the previous run's log (a failed start is worth reading)
            os.replace(log_path, log_path.with_name(log_path.name + ".1"))
        tailer = LogTailer(log_path, ring)
        process = RuntimeProcess.spawn(argv, env, log_path, cwd=workdir)
        _LOGGER.info("started %s for %s: pid %d, port %d", RUNTIME_NAME, spec.instance_id, process.pid, port)
        record = ProcessRecord(
            instance_id=spec.instance_id, runtime=RUNTIME, pid=process.pid, create_time=process.create_time,
            executable=str(exe), port=port,
            api_key=secrets.token_urlsafe(32),  # mlx_lm.server checks none; the proxy's header is ignored
            argv=argv, model_path=spec.model_path, served_name=spec.served_name,
            config_hash=config_hash(own_settings(spec), spec.model_path, spec.served_name, spec.extra_args),
            started_at=time.time(), startup_timeout_s=spec.startup_timeout_s)
        return RuntimeRun(RUNTIME_NAME, process, record, tailer)

    async def adopt(self, record: ProcessRecord, ring: LogRing) -> RuntimeRun | None:
        """Take over an mlx_lm.server a previous agent started (same PID, creation time and
        interpreter); its log keeps being followed. None when that process is gone."""
        return await adopt_recorded(RUNTIME_NAME, self.paths, record, ring)

    async def wait_ready(self, run: RuntimeRun, session: aiohttp.ClientSession,
                         startup_timeout_s: float) -> None:
        await run.wait_ready(session, startup_timeout_s, serves)

    def parse_metrics(self, text: str) -> Figures:
        """mlx_lm.server has no Prometheus endpoint: nothing to read."""
        return {}

    async def scrape(self, run: RuntimeRun, session: aiohttp.ClientSession) -> Figures:
        """No request or KV-cache figures: mlx_lm.server does not publish any."""
        return {}
