"""The llama.cpp driver: checks a launch spec, starts ``llama-server``, waits for it, stops it.

The argv is ``[exe] + agent.api.llamacpp.build_args(...)`` and nothing else. The per-instance API
key travels in the child's environment (``LLAMA_API_KEY``), never on the command line where every
user of the machine could read it. The child's environment is a small base plus the spec's
variables that ``ENV_ALLOWLIST`` admits; anything else is refused, not dropped silently.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent.api.launch_policy import ENV_ALLOWED_PREFIXES, ENV_ALLOWLIST, PolicyViolation
from agent.api.launch_policy import check_env as policy_check_env
from agent.api.launch_policy import check_extra_args as policy_check_extra_args
from agent.api.llamacpp import build_args, config_hash, lift_extra_args
from agent.api.models import LaunchSpec
from agent.api.safe_names import UnsafeName, check_node_path
from agent.logring import LogRing, LogTailer
from agent.paths import AgentPaths
from agent.records import ProcessRecord
from agent.runtimes.catalog import RuntimeCatalog, RuntimeExecutable
from agent.runtimes.checks import RuntimeChecks
from agent.runtimes.process import RuntimeProcess
from agent.runtimes.run import BuildCheck, RuntimeRun

_LOGGER = logging.getLogger(__name__)

RUNTIME_NAME = "llama-server"
FIRST_PORT = 18080
PORT_RANGE = 2000
LOOPBACK = "127.0.0.1"
API_KEY_ENV = "LLAMA_API_KEY"

# Variables of the agent's own environment every runtime gets.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "TMPDIR")
# Variables a launch spec may set, and the argument rules: one owner, shared with the daemon.
# Flags a spec may not pass in extra_args: they would change the key, the log file, serve files,
# or download a model from the network. (--host/--port/--model/--alias are the builder's and are
# dropped by build_args.)
EXTRA_ARGS_DENYLIST = frozenset({
    "--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file", "--path", "--log-file",
    "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hft", "--hf-token",
    "-hfv", "--hf-repo-v", "-hffv", "--hf-file-v", "-dr", "--docker-repo", "--webui",
})


class SpecRejected(ValueError):
    """The launch spec cannot be run as it is; the message says what to change."""


class NoRuntime(RuntimeError):
    """No llama-server executable was found."""


def env_allowed(name: str) -> bool:
    return name in ENV_ALLOWLIST or name.startswith(ENV_ALLOWED_PREFIXES)


def check_env(env: Mapping[str, str]) -> None:
    try:
        policy_check_env(env)
    except PolicyViolation as exc:
        raise SpecRejected(str(exc)) from exc


def real_inside(folder: str, path: str) -> bool:
    """Whether ``path`` lies in ``folder`` on this disk, symlinks resolved."""
    if not os.path.isabs(path):
        return False
    root = os.path.realpath(folder)
    return os.path.commonpath([root, os.path.realpath(path)]) == root and os.path.realpath(path) != root


def check_extra_args(extra_args: Iterable[str], model_path: str = "/") -> None:
    extra_args = list(extra_args)
    for arg in extra_args:
        flag = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if flag in EXTRA_ARGS_DENYLIST:
            raise SpecRejected(f"extra argument {flag} is not allowed: the agent owns that setting")
        if "\0" in arg:
            raise SpecRejected("an extra argument contains a NUL byte")
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
        if os.path.commonpath([root, os.path.abspath(model_path)]) == root \
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


def child_env(spec_env: Mapping[str, str], api_key: str, library_dir: Path | None,
              environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The runtime's whole environment: the base, the library directory, the spec, the key."""
    source = os.environ if environ is None else environ
    env = {key: source[key] for key in BASE_ENV_KEYS if key in source}
    if library_dir is not None:
        env["LD_LIBRARY_PATH"] = str(library_dir)
        env["DYLD_LIBRARY_PATH"] = str(library_dir)
    check_env(spec_env)
    env.update(spec_env)
    env[API_KEY_ENV] = api_key
    return env


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option the runtime's own listener uses, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_free_port(taken: Iterable[int] = (), first: int = FIRST_PORT, count: int = PORT_RANGE) -> int:
    """The lowest port from ``first`` that no instance holds and that binds on loopback."""
    held = set(taken)
    for port in range(first, first + count):
        if port not in held and port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {first}-{first + count - 1} on {LOOPBACK}")


class LlamaCppDriver:
    """Starts and adopts llama-server processes for one agent home."""

    def __init__(self, paths: AgentPaths, catalog: RuntimeCatalog, checks: RuntimeChecks | None = None) -> None:
        self.paths = paths
        self.catalog = catalog
        self.checks = checks if checks is not None else RuntimeChecks(paths.runtime_checks_file)

    def executable(self) -> RuntimeExecutable:
        exe = self.catalog.llama_server()
        if exe is None:
            raise NoRuntime("no llama-server found: build it with `make runtime`, put llama-server "
                            "on PATH, or start the agent with --llama-server PATH")
        return exe

    def _build_check(self, exe: RuntimeExecutable) -> BuildCheck:
        """This build's fingerprint; refuses a build already seen to stop on SIGILL here."""
        fingerprint = self.checks.fingerprint(exe.path, exe.library_dir)
        self.checks.refuse_if_known_bad(fingerprint)
        return BuildCheck(self.checks, fingerprint, str(exe.path))

    def launch(self, spec: LaunchSpec, port: int, ring: LogRing) -> RuntimeRun:
        """Spawn llama-server for ``spec`` on ``port``; readiness is the run's to wait for."""
        check_spec(spec, self.paths.models_dir)
        exe = self.executable()
        build_check = self._build_check(exe)
        argv = [str(exe.path)] + build_args(spec.settings, spec.model_path, spec.served_name, port,
                                            spec.extra_args)
        api_key = secrets.token_urlsafe(32)
        env = child_env(spec.env, api_key, exe.library_dir)
        log_path = self.paths.instance_log(spec.instance_id)
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        _rotate(log_path)
        tailer = LogTailer(log_path, ring)
        process = RuntimeProcess.spawn(argv, env, log_path, cwd=self.paths.home)
        _LOGGER.info("started %s for %s: pid %d, port %d", RUNTIME_NAME, spec.instance_id, process.pid, port)
        record = ProcessRecord(
            instance_id=spec.instance_id, pid=process.pid, create_time=process.create_time,
            executable=str(exe.path), port=port, api_key=api_key, argv=argv, model_path=spec.model_path,
            served_name=spec.served_name,
            config_hash=config_hash(spec.settings, spec.model_path, spec.served_name, spec.extra_args),
            started_at=time.time(), startup_timeout_s=spec.startup_timeout_s)
        return RuntimeRun(RUNTIME_NAME, process, record, tailer, build_check=build_check)

    def adopt(self, record: ProcessRecord, process: RuntimeProcess, ring: LogRing) -> RuntimeRun:
        """Take over a runtime a previous agent started; its log keeps being followed."""
        tailer = LogTailer(self.paths.instance_log(record.instance_id), ring, from_end=True)
        _LOGGER.info("adopted %s for %s: pid %d, port %d", RUNTIME_NAME, record.instance_id,
                     record.pid, record.port)
        return RuntimeRun(RUNTIME_NAME, process, record, tailer, adopted=True)


def _rotate(log_path: Path) -> None:
    """Keep the previous run's log as ``.1`` (a failed start is worth reading after a retry)."""
    if log_path.exists():
        os.replace(log_path, log_path.with_name(log_path.name + ".1"))
