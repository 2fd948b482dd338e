"""The llama.cpp driver (a ``RuntimeDriver``): checks a launch spec, starts ``llama-server``, says
when it is ready, adopts it after an agent restart and reads its ``/metrics`` and ``/slots``.

The argv is ``[exe] + build_command(spec, port)`` (``agent.api.llamacpp.build_args``) and nothing
else. The per-instance API
key travels in the child's environment (``LLAMA_API_KEY``), never on the command line where every
user of the machine could read it. The child's environment is a small base plus the spec's
variables that ``ENV_ALLOWLIST`` admits; anything else is refused, not dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from agent.api.backends import Backend, BackendChoice, Pick, parse_offload, pick_backend
from agent.api.launch_policy import ENV_ALLOWED_PREFIXES, ENV_ALLOWLIST, PolicyViolation
from agent.api.launch_policy import check_env as policy_check_env
from agent.api.launch_policy import check_extra_args as policy_check_extra_args
from agent.api.llamacpp import (
    CUDA_DEVICE,
    build_args,
    config_hash,
    gpu_env,
    lift_extra_args,
    parse_args,
)
from agent.api.models import LaunchSpec
from agent.api.runtimes import RuntimeOffer, profile
from agent.gguf_facts import adapter_problem, architecture
from agent.gguf_reader import GgufError, read_header
from agent.logring import RING_LINES, LogRing, LogTailer
from agent.paths import AgentPaths
from agent.records import ProcessRecord
from agent.rpc.forwards import ForwardSet, RpcForwards
from agent.runtimes.backends import (
    BackendProbe,
    inherited_gpu_environment,
    module_fingerprint,
)
from agent.runtimes.catalog import RuntimeCatalog, RuntimeExecutable
from agent.runtimes.checks import (
    ILLEGAL_INSTRUCTION,
    RuntimeChecks,
    Verdict,
    is_illegal_instruction,
)
from agent.runtimes.driver import Figures, NoRuntime, SpecRejected
from agent.runtimes.ports import FIRST_PORT  # noqa: F401 - the agent's default port, kept importable here
from agent.runtimes.process import RuntimeProcess, describe_exit
from agent.runtimes.prometheus import parse_prometheus
from agent.runtimes.run import HEALTH_TIMEOUT, RuntimeRun, StartFailed, adopt_recorded
from core import safe_names
from core.safe_names import UnsafeName, check_node_path, commonpath_inside

_LOGGER = logging.getLogger(__name__)

RUNTIME = "llamacpp"
RUNTIME_NAME = "llama-server"
API_KEY_ENV = "LLAMA_API_KEY"
CHECK_TIMEOUT_S = 15.0  # a build that loaded but cannot give one token by then stays unchecked
SCRAPE_TIMEOUT = aiohttp.ClientTimeout(total=2, connect=1)
_METRICS = {  # llama.cpp name -> InstanceSample field
    "llamacpp:prompt_tokens_total": "prompt_tokens_total",
    "llamacpp:tokens_predicted_total": "generation_tokens_total",
    "llamacpp:requests_processing": "requests_processing",
    "llamacpp:requests_deferred": "requests_deferred",
    "llamacpp:kv_cache_usage_ratio": "kv_cache_usage_ratio",  # removed from newer builds
    "llamacpp:kv_cache_tokens": "kv_cache_tokens",  # removed from newer builds
}

# libllama's own load report ("offloaded 19/19 layers to GPU", the buffer size per device) is logged
# at llama-server's verbosity 4 only (its default is 3): a portable build's run is started with it,
# unless the spec's arguments set a verbosity themselves.
PLACEMENT_LOG_ARGS = ("--log-verbosity", "4")
VERBOSITY_FLAGS = frozenset({"-v", "--verbose", "--log-verbose", "-lv", "--verbosity", "--log-verbosity"})

# Variables of the agent's own environment every runtime gets.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "TMPDIR")
# On Windows a process without SYSTEMROOT cannot even start Winsock, and the CRT wants TEMP/TMP;
# names there are case-insensitive (``Path``, ``SystemRoot``), so they are matched that way.
WINDOWS_BASE_ENV_KEYS = ("PATH", "PATHEXT", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "TEMP", "TMP",
                         "USERPROFILE", "LOCALAPPDATA", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE")
# Variables a launch spec may set, and the flags it may not pass (``DENIED_FLAGS``): one owner,
# ``agent.api.launch_policy``, shared with the daemon.


def env_allowed(name: str) -> bool:
    return name in ENV_ALLOWLIST or name.startswith(ENV_ALLOWED_PREFIXES)


def check_env(env: Mapping[str, str]) -> None:
    try:
        policy_check_env(env)
    except PolicyViolation as exc:
        raise SpecRejected(str(exc)) from exc


def real_inside(folder: str, path: str) -> bool:
    """Whether ``path`` lies in ``folder`` on this disk, symlinks resolved."""
    return os.path.isabs(path) and safe_names.real_inside(folder, path)


def check_extra_args(extra_args: Iterable[str], model_path: str = "/") -> None:
    try:
        policy_check_extra_args(extra_args, model_path, inside=real_inside)
    except PolicyViolation as exc:
        raise SpecRejected(str(exc)) from exc


def check_model_file(model_path: str, models_dir: Path | None) -> None:
    """An absolute path to a file; one under the agent's models folder must not link out of it."""
    try:
        check_node_path(model_path)
    except UnsafeName as exc:
        raise SpecRejected(str(exc)) from exc
    if not os.path.isfile(model_path):
        raise SpecRejected(f"model file not found on this node: {model_path}")
    if models_dir is not None:
        root = os.path.abspath(models_dir)
        if commonpath_inside(root, os.path.abspath(model_path)) \
                and not real_inside(str(models_dir), model_path):
            raise SpecRejected(f"model file {model_path} is a link that leads out of the models folder")


def check_spec(spec: LaunchSpec, models_dir: Path | None = None) -> None:
    """Refuse a spec that could never start, or reaches beyond its model, before anything is spawned."""
    check_env(spec.env)
    check_extra_args(spec.extra_args, spec.model_path)
    try:
        lift_extra_args(spec.settings, list(spec.extra_args))
    except ValueError as exc:
        raise SpecRejected(f"extra_args: {exc}") from exc
    check_model_file(spec.model_path, models_dir)
    if spec.adapters:
        check_adapters(spec)


def check_adapters(spec: LaunchSpec) -> None:
    """Each adapter a GGUF LoRA in the model's folder, made for the model's architecture."""
    if not profile(spec.runtime).takes_adapters:
        raise SpecRejected(f"adapters: only llama.cpp takes LoRA adapters, not {spec.runtime}")
    try:
        base = architecture(read_header(spec.model_path))
    except (OSError, GgufError) as exc:
        raise SpecRejected(f"adapters: the model file's header could not be read: {exc}") from exc
    for adapter in spec.adapters:
        where = f"adapter '{adapter.name}' ({adapter.file[:200]})"
        if "," in adapter.file:
            raise SpecRejected(f"{where}: a file name with ',' is not allowed (llama-server splits --lora at commas)")
        try:
            check_node_path(adapter.file)
            policy_check_extra_args(["--lora", adapter.file], spec.model_path, inside=real_inside)
        except (UnsafeName, PolicyViolation) as exc:
            raise SpecRejected(f"{where}: {exc}") from exc
        if not os.path.isfile(adapter.file):
            raise SpecRejected(f"{where}: file not found on this node")
        try:
            problem = adapter_problem(read_header(adapter.file), base)
        except (OSError, GgufError) as exc:
            problem = f"is not a readable GGUF file: {exc}"
        if problem is not None:
            raise SpecRejected(f"{where} {problem}")


def child_env(spec_env: Mapping[str, str], api_key: str, library_dir: Path | None,
              environ: Mapping[str, str] | None = None, platform: str = sys.platform) -> dict[str, str]:
    """The runtime's whole environment: the base, the library directory, the spec, the key.

    POSIX: the library directory is ``LD_LIBRARY_PATH`` / ``DYLD_LIBRARY_PATH``. Windows has
    neither: DLLs are found on ``PATH``, so the directory goes first there.
    """
    source = os.environ if environ is None else environ
    if platform == "win32":
        by_name = {key.upper(): value for key, value in source.items()}
        env = {key: by_name[key] for key in WINDOWS_BASE_ENV_KEYS if key in by_name}
        if library_dir is not None:
            env["PATH"] = ";".join(filter(None, [str(library_dir), env.get("PATH", "")]))
    else:
        env = {key: source[key] for key in BASE_ENV_KEYS if key in source}
        if library_dir is not None:
            env["LD_LIBRARY_PATH"] = str(library_dir)
            env["DYLD_LIBRARY_PATH"] = str(library_dir)
    env.update(inherited_gpu_environment(source))  # the operator's GGML_VK_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES ...
    check_env(spec_env)
    env.update(spec_env)
    env[API_KEY_ENV] = api_key
    return env


def build_command(spec: LaunchSpec, port: int, rpc: list[str] | None = None,
                  backend: Backend | None = None) -> list[str]:
    """llama-server's argv after the executable for ``spec`` on ``port``: pure, golden-tested.
    ``rpc``: the loopback forwards to ``spec.rpc_peers``' rpc-servers, in the same order.
    ``backend``: what it computes on; the spec's GPUs are named as that backend names them."""
    return build_args(spec.settings, spec.model_path, spec.served_name, port, spec.extra_args,
                      adapters=spec.adapters, rpc=rpc,
                      rpc_devices=[p.devices for p in spec.rpc_peers] if rpc else None,
                      device_prefix=backend.device_prefix if backend is not None else CUDA_DEVICE)


def kv_from_slots(slots: list[object], ctx_size: int | None) -> dict[str, float | int | None]:
    """KV-cache figures summed over llama-server's ``/slots``; empty when the slots do not say.

    With a unified cache every slot reports the whole context as its ``n_ctx``, so the sum is
    capped by the configured ``--ctx-size`` when the runtime was given one.
    """
    held = capacity = 0
    for slot in slots:
        if not isinstance(slot, dict) or not isinstance(slot.get("n_ctx"), int):
            return {}
        capacity += slot["n_ctx"]
        tokens = slot.get("n_prompt_tokens")  # the tokens its sequence holds, prompt and generated
        held += tokens if isinstance(tokens, int) and tokens > 0 else 0
    if ctx_size:
        capacity = min(capacity, ctx_size)
    if capacity <= 0:
        return {}
    return {"kv_cache_tokens": held, "kv_cache_capacity": capacity,
            "kv_cache_usage_ratio": min(1.0, held / capacity)}


def parse_metrics(text: str) -> Figures:
    """llama-server's ``/metrics`` as ``InstanceSample`` fields (``kv_source`` when it has the gauge)."""
    metrics = parse_prometheus(text)
    figures: Figures = {field: metrics.get(name) for name, field in _METRICS.items()}
    if figures.get("kv_cache_tokens") is not None:
        figures["kv_cache_tokens"] = int(figures["kv_cache_tokens"] or 0)
    if figures.get("kv_cache_usage_ratio") is not None:
        figures["kv_source"] = "metrics"
    return figures


def _ctx_size(run: RuntimeRun) -> int | None:
    try:
        return parse_args(run.record.argv).settings.ctx_size
    except ValueError:  # an adopted argv we cannot read: no cap
        return None


@dataclass(frozen=True)
class BuildCheck:
    """The build a run uses, and where its verdict is kept (see ``agent.runtimes.checks``).
    ``backend``: a GPU backend still unproven here; the run's first generation proves it or not."""

    checks: RuntimeChecks
    fingerprint: str
    executable: str
    timeout_s: float = CHECK_TIMEOUT_S
    backend: Backend | None = None

    @property
    def backend_key(self) -> str | None:
        return module_fingerprint(self.fingerprint, self.backend) if self.backend is not None else None

    def backend_failed(self, why: str) -> None:
        self._backend_verdict("failed", why)

    def backend_ok(self, why: str) -> None:
        self._backend_verdict("ok", why)

    def _backend_verdict(self, verdict: Verdict, why: str) -> None:
        if self.backend_key is not None:
            self.checks.record(self.backend_key, verdict, self.executable, why)


# Words of a load that failed in the GPU backend rather than in the model (ggml's and the drivers').
GPU_FAILURE_WORDS = ("vulkan", "cuda", "metal", "vk::", "device memory", "out of memory", "failed to allocate",
                     "no kernel image", "driver")


def gpu_failure(code: int | None, last_lines: list[str]) -> bool:
    """Did a run that exited before it was ready fail in its GPU backend? A crash (a signal) does; an
    ordinary exit only when its last lines speak of the GPU (a bad model file fails on any backend)."""
    if code is None or code == 0:
        return False
    if code < 0 or code & 0xFFFFFFFF >= 0xC0000000:  # a signal; on Windows an NTSTATUS crash code
        return True
    return any(word in line.lower() for line in last_lines[-20:] for word in GPU_FAILURE_WORDS)


def explain_exit(build_check: BuildCheck | None,
                 last_lines: Callable[[], list[str]] = list) -> Callable[[int | None], str | None]:
    """``ILLEGAL_INSTRUCTION`` for an exit on SIGILL, recorded against the build when it is known.
    An unproven GPU backend whose first run failed in the GPU is recorded as failed."""
    def explain(code: int | None) -> str | None:
        if not is_illegal_instruction(code):
            if build_check is not None and build_check.backend is not None and gpu_failure(code, last_lines()):
                # An unproven GPU backend that died before it computed: that backend fails here.
                build_check.backend_failed(f"llama-server {describe_exit(code)} on its first start with "
                                           f"{build_check.backend.label}")
            return None
        if build_check is not None:
            build_check.checks.record(build_check.fingerprint, "illegal_instruction",
                                      build_check.executable, "stopped on SIGILL")
        return ILLEGAL_INSTRUCTION
    return explain


async def _healthy(run: RuntimeRun, session: aiohttp.ClientSession) -> bool:
    try:
        async with session.get(f"{run.endpoint}/health", headers=run.auth_headers(),
                               timeout=HEALTH_TIMEOUT) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _answers_with_our_key(run: RuntimeRun, session: aiohttp.ClientSession) -> bool | None:
    """``/health`` is public: a server already on this port (another agent's runtime, say) would
    pass it. ``/slots`` needs the key, so only our own runtime answers it (None: cannot tell)."""
    try:
        async with session.get(f"{run.endpoint}/slots", headers=run.auth_headers(),
                               timeout=HEALTH_TIMEOUT) as resp:
            if resp.status in (401, 403):
                return False
            return True if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


async def serves(run: RuntimeRun, session: aiohttp.ClientSession) -> bool:
    """llama-server's "ready": ``/health`` says 200 and the server on the port holds our key."""
    if not await _healthy(run, session):
        return False
    if await _answers_with_our_key(run, session) is False:
        # Another server took the port between our probe and the runtime's bind: not ready;
        # the runtime exits when its bind fails, and that exit is the honest failure.
        _LOGGER.warning("port %d answers /health but not with this instance's key", run.port)
        return False
    return True


async def check_build(run: RuntimeRun, check: BuildCheck | None, session: aiohttp.ClientSession) -> None:
    """First sight of this build: one one-token generation; an answer records it as ``ok``.

    Done before the run counts as ready, so "ready" has generated and the first user request
    finds every slot free. No answer in time leaves the build unchecked (next start asks again).
    """
    if check is None:
        return
    build_known = check.checks.verdict(check.fingerprint) is not None
    if build_known and check.backend is None:
        return
    why = await one_token(run, session, check.timeout_s)
    if why is not None:
        # A build that dies here is recorded by the exit path (SIGILL, a GPU crash); anything else: next time.
        _LOGGER.info("runtime check of %s inconclusive: %s", check.executable, why)
        return
    if not build_known:
        check.checks.record(check.fingerprint, "ok", check.executable, "one-token generation")
    if check.backend is not None:
        offload = run.record.offload
        if offload is None or offload.layers_total is None:
            _LOGGER.info("runtime check of %s on %s: the log did not say where the layers went", check.executable,
                         check.backend.label)
        elif offload.layers_on_gpu:
            check.backend_ok(f"one-token generation with {offload.layers_on_gpu}/{offload.layers_total} layers "
                             f"on {', '.join(offload.devices) or check.backend.label}")
        elif "--n-gpu-layers" not in run.record.argv:  # it was free to offload and put nothing on the GPU
            check.backend_failed(f"it loaded with {check.backend.label} but offloaded no layers")


async def one_token(run: RuntimeRun, session: aiohttp.ClientSession, timeout_s: float) -> str | None:
    """Ask a ready run for one generated token: None when it answered, else what went wrong
    (the build check above, and the smoke test of a rolled-out build, ``agent.runtimes.rollout``)."""
    try:
        async with session.post(f"{run.endpoint}/v1/completions", headers=run.auth_headers(),
                                json={"prompt": "Hello", "max_tokens": 1, "temperature": 0},
                                timeout=aiohttp.ClientTimeout(total=timeout_s, connect=5)) as resp:
            body = await resp.json(content_type=None)
            if resp.status == 200 and isinstance(body, dict) and body.get("choices"):
                return None
            return f"HTTP {resp.status} without a completion"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"no answer ({type(exc).__name__}{f': {exc}' if str(exc) else ''})"


VERSION_TIMEOUT_S = 10.0
# ``version: 4589 (1d1e6a90)`` (a git build); ``version: 0.6.0-dev (build 0, commit unknown)`` (the
# sdist build this project makes: no git there, so build 0 and the manifest's version is the truth).
_VERSION_LINE = re.compile(r"^version:\s*(?P<version>\S+)(?:\s*\((?P<detail>[^)]*)\))?", re.MULTILINE)
_BUILD = re.compile(r"\bbuild\s+(?P<build>\d+)")
_COMMIT = re.compile(r"\bcommit\s+(?P<commit>[0-9a-fA-F]{6,40})\b")


@dataclass(frozen=True)
class ReportedVersion:
    """What ``llama-server --version`` said: its build number and commit, when it knows them."""

    build: int | None = None
    commit: str | None = None
    text: str = ""  # its first line, or why it said nothing


def parse_version_output(output: str) -> ReportedVersion:
    """The build and commit from ``--version``'s output; build 0 (no git) counts as unknown."""
    match = _VERSION_LINE.search(output)
    if match is None:
        return ReportedVersion(text=output.strip().splitlines()[0] if output.strip() else "")
    version, detail = match["version"], match["detail"] or ""
    build: int | None = None
    commit: str | None = None
    if version.isdigit():  # ``version: 4589 (1d1e6a90)``
        build = int(version)
        if re.fullmatch(r"[0-9a-fA-F]{6,40}", detail.strip()):
            commit = detail.strip()
    found_build, found_commit = _BUILD.search(detail), _COMMIT.search(detail)
    if found_build:
        build = int(found_build["build"])
    if found_commit:
        commit = found_commit["commit"]
    return ReportedVersion(build=build or None, commit=commit, text=match.group(0).strip())


def offered_version(reported: ReportedVersion, manifest_version: str | None) -> str | None:
    """The version an offer shows, saying where it comes from: the binary's own build number
    (``b4589 (1d1e6a90)``), else the build's ``runtime.json`` (``11434.0.0 (runtime.json)``)."""
    if reported.build is not None:
        return f"b{reported.build}" + (f" ({reported.commit})" if reported.commit else "")
    if manifest_version:
        return f"{manifest_version} (runtime.json)"
    return None


async def ask_version(exe: RuntimeExecutable, timeout_s: float = VERSION_TIMEOUT_S) -> ReportedVersion:
    """Run ``llama-server --version`` (it prints to stderr) with its library directory; never raises."""
    env = query_env(exe)
    try:
        process = await asyncio.create_subprocess_exec(
            str(exe.path), "--version", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env)
    except OSError as exc:
        return ReportedVersion(text=f"cannot run {exe.path} --version: {exc}")
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        await _reap(process)
        return ReportedVersion(text=f"{exe.path} --version gave no answer within {timeout_s:g} s")
    except asyncio.CancelledError:  # the agent stops while asking: leave no child (nor its transport) behind
        await asyncio.shield(_reap(process))
        raise
    return parse_version_output(output.decode(errors="replace"))


async def _reap(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    await process.wait()


class LlamaCppDriver:
    """Starts and adopts llama-server processes for one agent home: a ``RuntimeDriver``."""

    runtime = RUNTIME
    runtime_name = RUNTIME_NAME

    def __init__(self, paths: AgentPaths, catalog: RuntimeCatalog, checks: RuntimeChecks | None = None,
                 check_timeout_s: float = CHECK_TIMEOUT_S, rpc_forwards: RpcForwards | None = None,
                 driver_version: Callable[[], str | None] = lambda: None) -> None:
        self.paths = paths
        self.catalog = catalog
        self.rpc_forwards = rpc_forwards  # a model across nodes: loopback forwards to its helpers (agent.rpc)
        self._rpc_watchers: set[asyncio.Task[None]] = set()
        self.checks = checks if checks is not None else RuntimeChecks(paths.runtime_checks_file)
        self.check_timeout_s = check_timeout_s
        self._build_checks: weakref.WeakKeyDictionary[RuntimeRun, BuildCheck] = weakref.WeakKeyDictionary()
        self._versions: dict[str, ReportedVersion] = {}  # build fingerprint -> what its --version said
        self._version_lock = asyncio.Lock()
        self.backends = BackendProbe(self.checks, query_env, driver_version)
        self._picks: dict[str, Pick] = {}  # instance id -> the backend ``prepare`` chose for its launch

    def executable(self) -> RuntimeExecutable:
        exe = self.catalog.llama_server()
        if exe is None:
            raise NoRuntime("no llama-server found: build it with `make runtime`, put llama-server "
                            "on PATH, or start the agent with --llama-server PATH")
        return exe

    async def offer(self) -> RuntimeOffer:
        """The llama-server this agent would start, honestly: its version (``--version``, asked once
        per build fingerprint, off the event loop), the fingerprint as digest, the path; unavailable
        with the reason where there is none, or where the build is known to stop on SIGILL here."""
        exe = await asyncio.to_thread(self.catalog.llama_server)
        if exe is None:
            return RuntimeOffer(runtime="llamacpp", available=False,
                                reason="no llama-server found: build it with `make runtime`, put llama-server on "
                                       "PATH, or start the agent with --llama-server PATH")
        location = str(exe.path)
        try:
            fingerprint = await asyncio.to_thread(self.checks.fingerprint, exe.path, exe.library_dir)
        except OSError as exc:
            return RuntimeOffer(runtime="llamacpp", available=False, location=location,
                                reason=f"cannot read llama-server at {location}: {exc}")
        verdict = self.checks.verdict(fingerprint)
        if verdict is not None and verdict.verdict == "illegal_instruction":
            return RuntimeOffer(runtime="llamacpp", available=False, digest=fingerprint, location=location,
                                reason=ILLEGAL_INSTRUCTION)
        reported = self._versions.get(fingerprint)
        if reported is None:
            async with self._version_lock:
                reported = self._versions.get(fingerprint)
                if reported is None:
                    reported = await ask_version(exe)
                    self._versions[fingerprint] = reported
        backends = await self.backends.states(exe, fingerprint) if exe.backends else []
        return RuntimeOffer(runtime="llamacpp", available=True, version=offered_version(reported, exe.version),
                            digest=fingerprint, location=location, backends=backends)

    async def prepare(self, spec: LaunchSpec, ring: LogRing) -> None:
        """Choose the backend this start computes on (``pick_backend``: the node's choice against
        what this build's backends did here) and say it in the instance's log."""
        exe = await asyncio.to_thread(self.executable)
        if not exe.backends:
            self._picks.pop(spec.instance_id, None)
            return
        fingerprint = await asyncio.to_thread(self.checks.fingerprint, exe.path, exe.library_dir)
        states = await self.backends.states(exe, fingerprint)
        pick = pick_backend(spec.backend, states)
        self._picks[spec.instance_id] = pick
        state = next(s for s in states if s.backend is pick.backend)
        devices = ", ".join(f"{d.name} ({d.description})" for d in state.devices)
        ring.append([(f"[mirbadllm] backend: {pick.backend.label}{f' on {devices}' if devices else ''} "
                     f"(node choice: {spec.backend}){f'; not {pick.why}' if pick.why else ''}")])

    async def computes_on(self, choice: BackendChoice) -> Backend | None:
        """The backend a start with the node's ``choice`` computes on: the pick ``prepare`` makes, for
        admission and the plan to count memory where it lives. None for a build that names no
        backends (one on PATH, an older build), or none at all."""
        exe = await asyncio.to_thread(self.catalog.llama_server)
        if exe is None or not exe.backends:
            return None
        try:
            fingerprint = await asyncio.to_thread(self.checks.fingerprint, exe.path, exe.library_dir)
        except OSError:
            return None
        return pick_backend(choice, await self.backends.states(exe, fingerprint)).backend

    def build_command(self, spec: LaunchSpec, port: int) -> list[str]:
        return build_command(spec, port)

    def check(self, spec: LaunchSpec) -> None:
        check_spec(spec)
        if spec.rpc_peers and self.rpc_forwards is None:
            raise SpecRejected("rpc_peers: this agent forwards no RPC (it was built without agent.rpc)")
        self.executable()

    def _build_check(self, exe: RuntimeExecutable, backend: Backend | None = None) -> BuildCheck:
        """This build's fingerprint; refuses a build already seen to stop on SIGILL here. A GPU
        ``backend`` with no verdict yet is proven (or failed) by this run."""
        fingerprint = self.checks.fingerprint(exe.path, exe.library_dir)
        self.checks.refuse_if_known_bad(fingerprint)
        unproven = backend if backend is not None and backend.is_gpu and \
            self.checks.verdict(module_fingerprint(fingerprint, backend)) is None else None
        return BuildCheck(self.checks, fingerprint, str(exe.path), self.check_timeout_s, unproven)

    def launch(self, spec: LaunchSpec, port: int, ring: LogRing) -> RuntimeRun:
        """Spawn llama-server for ``spec`` on ``port``; readiness is ``wait_ready``'s."""
        check_spec(spec, self.paths.models_dir)
        exe = self.executable()
        # The backend ``prepare`` chose; a build with GPU modules that was not prepared runs on the CPU.
        pick = self._picks.pop(spec.instance_id, None)
        backend = (pick.backend if pick is not None else Backend.CPU) if exe.backends or exe.source == "build" else None
        build_check = self._build_check(exe, backend)
        forwards = self._open_forwards(spec)
        rpc = forwards.endpoints if forwards is not None else None
        argv = [str(exe.path)] + build_command(spec, port, rpc, backend)
        if backend is not None and not VERBOSITY_FLAGS & {a.split("=", 1)[0] for a in argv}:
            argv += PLACEMENT_LOG_ARGS
        api_key = secrets.token_urlsafe(32)
        env = child_env({**gpu_env(spec.settings), **spec.env}, api_key, exe.library_dir)  # CUDAn = NVML's GPU n
        if backend is not None:
            env.update(self.backends.environment(exe, backend))  # its one GPU module (GGML_BACKEND_PATH)
        log_path = self.paths.instance_log(spec.instance_id)
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        _rotate(log_path)
        tailer = LogTailer(log_path, ring)
        try:
            process = RuntimeProcess.spawn(argv, env, log_path, cwd=self.paths.home)
        except BaseException:
            if forwards is not None:
                forwards.stop_listening()
            raise
        if forwards is not None:
            self._close_on_exit(forwards, process)
        _LOGGER.info("started %s for %s: pid %d, port %d", RUNTIME_NAME, spec.instance_id, process.pid, port)
        record = ProcessRecord(
            instance_id=spec.instance_id, pid=process.pid, create_time=process.create_time,
            executable=str(exe.path), port=port, api_key=api_key, argv=argv, model_path=spec.model_path,
            served_name=spec.served_name,
            config_hash=config_hash(spec.settings, spec.model_path, spec.served_name, spec.extra_args,
                                    spec.adapters, [p.node_id for p in spec.rpc_peers]),
            started_at=time.time(), startup_timeout_s=spec.startup_timeout_s,
            backend=backend.value if backend is not None else None)
        run = RuntimeRun(RUNTIME_NAME, process, record, tailer,
                         explain_exit=explain_exit(build_check, lambda: tailer.lines(50)))
        self._build_checks[run] = build_check  # until it is ready
        return run

    def _open_forwards(self, spec: LaunchSpec) -> ForwardSet | None:
        if not spec.rpc_peers:
            return None
        if self.rpc_forwards is None:
            raise SpecRejected("rpc_peers: this agent forwards no RPC (it was built without agent.rpc)")
        return self.rpc_forwards.open(spec.instance_id, spec.rpc_peers)

    def _close_on_exit(self, forwards: ForwardSet, process: RuntimeProcess) -> None:
        """The forwards live as long as the llama-server that uses them (a stop, a crash)."""
        async def watch() -> None:
            try:
                await process.wait()
            finally:
                await forwards.close()

        task = asyncio.get_running_loop().create_task(watch(), name=f"rpc forwards {forwards.instance_id}")
        self._rpc_watchers.add(task)
        task.add_done_callback(self._rpc_watchers.discard)

    async def close(self) -> None:
        """The agent is going away: a model across nodes loses its forwards (its RPC breaks)."""
        for task in list(self._rpc_watchers):
            task.cancel()
        if self.rpc_forwards is not None:
            await self.rpc_forwards.close_all()

    async def adopt(self, record: ProcessRecord, ring: LogRing) -> RuntimeRun | None:
        """Take over a runtime a previous agent started (same PID, creation time and executable);
        its log keeps being followed. None when that process is gone."""
        return await adopt_recorded(RUNTIME_NAME, self.paths, record, ring, explain_exit(None))

    async def wait_ready(self, run: RuntimeRun, session: aiohttp.ClientSession,
                         startup_timeout_s: float) -> None:
        """``serves``, then the build's first generation; a build that died on it fails the start."""
        build_check = self._build_checks.pop(run, None)
        await run.wait_ready(session, startup_timeout_s, serves)
        offload = parse_offload(run.last_lines(RING_LINES))
        if offload.layers_total is not None:
            run.record.offload = offload
        await check_build(run, build_check, session)
        if run.process.poll():  # the build died on its first generation (SIGILL, say)
            code = await run.wait_exit()
            raise StartFailed(run.exit_message(code), run.last_lines(), code)

    def parse_metrics(self, text: str) -> Figures:
        return parse_metrics(text)

    async def scrape(self, run: RuntimeRun, session: aiohttp.ClientSession) -> Figures:
        """``/metrics``, then ``/slots`` (busy slots, and the KV use when the metrics lack it)."""
        figures: Figures = {}
        try:
            async with session.get(f"{run.endpoint}/metrics", headers=run.auth_headers(),
                                   timeout=SCRAPE_TIMEOUT) as resp:
                if resp.status == 200:
                    figures.update(self.parse_metrics(await resp.text()))
            async with session.get(f"{run.endpoint}/slots", headers=run.auth_headers(),
                                   timeout=SCRAPE_TIMEOUT) as resp:
                if resp.status == 200:
                    slots = await resp.json()
                    if isinstance(slots, list):
                        figures["slots_total"] = len(slots)
                        figures["slots_busy"] = sum(1 for s in slots if isinstance(s, dict)
                                                    and s.get("is_processing"))
                        if figures.get("kv_source") is None:
                            kv = kv_from_slots(slots, _ctx_size(run))
                            if kv:
                                figures.update(kv, kv_source="slots")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            _LOGGER.debug("cannot scrape %s: %s", run.endpoint, exc)
        return figures


def query_env(exe: RuntimeExecutable) -> dict[str, str]:
    """The environment a question to the build runs in (``--version``, ``--list-devices``): a
    runtime's, with its library directory, and without a key."""
    env = child_env({}, "", exe.library_dir)
    env.pop(API_KEY_ENV, None)
    return env


def _rotate(log_path: Path) -> None:
    """Keep the previous run's log as ``.1`` (a failed start is worth reading after a retry)."""
    if log_path.exists():
        os.replace(log_path, log_path.with_name(log_path.name + ".1"))
