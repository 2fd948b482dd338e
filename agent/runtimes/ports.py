"""Runtime ports: the lowest free port on loopback from ``FIRST_PORT`` that no instance holds.

Every runtime listens on 127.0.0.1 only (the agent's proxy is the way in), whichever driver
starts it; the probe's socket options are a pure choice per OS, golden-tested for each platform.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterable

FIRST_PORT = 18080
PORT_RANGE = 2000
LOOPBACK = "127.0.0.1"

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
