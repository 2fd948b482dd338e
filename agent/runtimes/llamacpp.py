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
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from agent.api.launch_policy import ENV_ALLOWED_PREFIXES, ENV_ALLOWLIST, PolicyViolation
from agent.api.launch_policy import check_env as policy_check_env
from agent.api.launch_policy import check_extra_args as policy_check_extra_args
from agent.api.llamacpp import build_args, config_hash, lift_extra_args
from agent.api.models import LaunchSpec
from agent.api.safe_names import UnsafeName, check_node_path, commonpath_inside
from agent.logring import LogRing, LogTailer
from agent.paths import AgentPaths
from agent.records import ProcessRecord
from agent.runtimes.catalog import RuntimeCatalog, RuntimeExecutable
from agent.runtimes.checks import RuntimeChecks
from agent.runtimes.process import RuntimeProcess
from agent.runtimes.run import CHECK_TIMEOUT_S, BuildCheck, RuntimeRun

_LOGGER = logging.getLogger(__name__)

RUNTIME_NAME = "llama-server"
FIRST_PORT = 18080
PORT_RANGE = 2000
LOOPBACK = "127.0.0.1"
API_KEY_ENV = "LLAMA_API_KEY"

# Variables of the agent's own environment every runtime gets.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "TMPDIR")
# On Windows a process without SYSTEMROOT cannot even start Winsock, and the CRT wants TEMP/TMP;
# names there are case-insensitive (``Path``, ``SystemRoot``), so they are matched that way.
WINDOWS_BASE_ENV_KEYS = ("PATH", "PATHEXT", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "TEMP", "TMP",
                         "USERPROFILE", "LOCALAPPDATA", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE")
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
    root, real = os.path.realpath(folder), os.path.realpath(path)
    return real != root and commonpath_inside(root, real)


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
    check_env(spec_env)
    env.update(spec_env)
    env[API_KEY_ENV] = api_key
    return env


# (level, option, value) by name: SO_EXCLUSIVEADDRUSE exists only in Windows' socket module.
SocketOption = tuple[str, str, int]
SO_EXCLUSIVEADDRUSE_FALLBACK = ~4  # ~SO_REUSEADDR, its value in winsock2.h


def probe_socket_options(platform: str = sys.platform) -> list[SocketOption]:
    """The options the free-port probe sets before it binds.

    POSIX: SO_REUSEADDR, as the runtime's own listener, so a port in TIME_WAIT counts as free.
    Windows: SO_REUSEADDR there lets a bind *steal* a port another socket is listening on, so the
    probe would call a busy port free; SO_EXCLUSIVEADDRUSE makes a bind fail on any port in use.
    """
    if platform == "win32":
        return [("SOL_SOCKET", "SO_EXCLUSIVEADDRUSE", 1)]
    return [("SOL_SOCKET", "SO_REUSEADDR", 1)]


def _socket_constant(name: str) -> int:
    if name == "SO_EXCLUSIVEADDRUSE":
        return int(getattr(socket, name, SO_EXCLUSIVEADDRUSE_FALLBACK))
    return int(getattr(socket, name))


def port_is_free(port: int, host: str = LOOPBACK, platform: str = sys.platform,
                 make_socket: Callable[..., socket.socket] = socket.socket) -> bool:
    with make_socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        for level, option, value in probe_socket_options(platform):
            sock.setsockopt(_socket_constant(level), _socket_constant(option), value)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_free_port(taken: Iterable[int] = (), first: int = FIRST_PORT, count: int = PORT_RANGE,
                   platform: str = sys.platform) -> int:
    """The lowest port from ``first`` that no instance holds and that binds on loopback."""
    held = set(taken)
    for port in range(first, first + count):
        if port not in held and port_is_free(port, platform=platform):
            return port
    raise RuntimeError(f"no free port in {first}-{first + count - 1} on {LOOPBACK}")


class LlamaCppDriver:
    """Starts and adopts llama-server processes for one agent home."""

    def __init__(self, paths: AgentPaths, catalog: RuntimeCatalog, checks: RuntimeChecks | None = None,
                 check_timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.paths = paths
        self.catalog = catalog
        self.checks = checks if checks is not None else RuntimeChecks(paths.runtime_checks_file)
        self.check_timeout_s = check_timeout_s

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
        return BuildCheck(self.checks, fingerprint, str(exe.path), self.check_timeout_s)

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
