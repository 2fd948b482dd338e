"""A stand-in for ggml-rpc-server: listens where ``-H``/``-p`` say and echoes every byte back.

It speaks no RPC: the tests that use it check what the agent does around an rpc-server (where it
binds, who reaches it through the tunnel, when it stops). It logs its argv and each connection,
as the real one logs its devices, so a test reads what the agent asked for.
"""

from __future__ import annotations

import socket
import sys
import threading


def _echo(conn: socket.socket) -> None:
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def main(argv: list[str]) -> int:
    host = argv[argv.index("-H") + 1] if "-H" in argv else "127.0.0.1"
    port = int(argv[argv.index("-p") + 1]) if "-p" in argv else 50052
    print(f"fake rpc-server: {' '.join(argv)}", flush=True)
    server = socket.create_server((host, port))
    print(f"listening on {host}:{port}", flush=True)
    while True:
        conn, peer = server.accept()
        print(f"accepted a connection from {peer[0]}", flush=True)
        threading.Thread(target=_echo, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
