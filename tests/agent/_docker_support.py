"""A real Docker engine for the container driver's tests, and a fake vLLM image built on it.

``docker_engine`` uses the engine on ``/var/run/docker.sock`` when one answers; otherwise, as
root, it starts ``dockerd`` with its own data-root, exec-root, pidfile and socket under a temp dir
(iptables off), waits for its socket to answer, and stops it after the session. Where none can
start the tests are skipped with the reason.

``fake_vllm_image`` is ``docker import`` of a root file system made here: the host's
``/usr/bin/python3``, the shared objects ``ldd`` lists for it and for the stdlib extensions the
fake imports, those stdlib modules, and ``tests/fakes/fake_vllm_server.py`` as the entrypoint.
No registry is needed. The tag is the content hash, so an engine that has it already skips the
build (once per session with a fresh engine, never again with a lasting one).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fakes" / "fake_vllm_server.py"
HOST_PYTHON = "/usr/bin/python3"
SYSTEM_SOCKET = "/var/run/docker.sock"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Engine:
    socket: str

    def cli(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["docker", "-H", f"unix://{self.socket}", *args], input=stdin,
                              capture_output=True, check=False, timeout=120)


def _answers(path: str) -> bool:
    if not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b"200 OK" in sock.recv(256)
        except OSError:
            return False


def _wait_for_socket(path: str, proc: subprocess.Popen[bytes], timeout_s: float) -> str | None:
    """None once the engine answers on ``path``; else why it did not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"dockerd exited {proc.returncode}"
        if _answers(path):
            return None
        time.sleep(0.05)  # polling a condition (the socket answering), bounded by the deadline
    return f"dockerd did not answer on {path} within {timeout_s:g} s"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Engine]:
    if sys.platform != "linux":
        pytest.skip("the container driver runs on Linux only")
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI on this machine")
    if _answers(SYSTEM_SOCKET):
        yield Engine(SYSTEM_SOCKET)
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        pytest.skip("no Docker engine answers and dockerd cannot be started here (needs dockerd and root)")
    root = Path(tempfile.mkdtemp(prefix="mirbadllm-dockerd-", dir="/tmp"))  # short: socket path limit
    sock = str(root / "docker.sock")
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - open for the engine's lifetime
    proc = subprocess.Popen(
        [dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{sock}", "--iptables=false",
         "--ip6tables=false"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    why = _wait_for_socket(sock, proc, START_TIMEOUT_S)
    if why is not None:
        proc.kill()
        proc.wait()
        log.close()
        tail = (root / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot start dockerd: {why}: {' | '.join(tail)}")
    try:
        yield Engine(sock)
    finally:
        subprocess.run(["docker", "-H", f"unix://{sock}", "rm", "-f", *_all_containers(sock)],
                       capture_output=True, check=False)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(["umount", "-R", str(root / "data")], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _all_containers(sock: str) -> list[str]:
    done = subprocess.run(["docker", "-H", f"unix://{sock}", "ps", "-aq"], capture_output=True, check=False)
    return done.stdout.decode().split()


def _stdlib_files() -> list[str]:
    """The files the host Python loads to run the fake (its modules and their extensions)."""
    probe = ("import sys, runpy\n"
             f"sys.argv = ['x', '--help']\n"
             "try:\n"
             f"    runpy.run_path({str(FAKE_SERVER)!r}, run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "import encodings.idna, encodings.latin_1, encodings.ascii\n"
             "print('\\n'.join(sorted({m.__file__ for m in list(sys.modules.values())"
             " if getattr(m, '__file__', None)})))\n")
    done = subprocess.run([HOST_PYTHON, "-S", "-c", probe], capture_output=True, check=True, text=True)
    return [line for line in done.stdout.splitlines() if line.startswith("/usr/lib/python3")]


def _shared_objects(binaries: list[str]) -> set[str]:
    found: set[str] = set()
    for binary in binaries:
        done = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                found.add(path)
                found.add(os.path.realpath(path))
    return found


def _rootfs_tar() -> bytes:
    stdlib = _stdlib_files()
    extensions = [f for f in stdlib if f.endswith(".so")]
    files = sorted({HOST_PYTHON, os.path.realpath(HOST_PYTHON), *stdlib,
                    *_shared_objects([HOST_PYTHON, *extensions])})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in files:
            # Dereferenced: a link's target may sit behind a merged-/usr link the image lacks.
            info = tar.gettarinfo(os.path.realpath(path), arcname=path.lstrip("/"))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
        server = FAKE_SERVER.read_bytes()
        info = tarfile.TarInfo("fake_vllm_server.py")
        info.size = len(server)
        tar.addfile(info, io.BytesIO(server))
        for folder in ("models", "tmp"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    return out.getvalue()


@pytest.fixture(scope="session")
def fake_vllm_image(docker_engine: Engine) -> str:
    """The fake vLLM image's reference (``mirbadllm-fake-vllm:<content hash>``)."""
    if not os.path.exists(HOST_PYTHON):
        pytest.skip(f"no {HOST_PYTHON} to build the fake vLLM image from")
    rootfs = _rootfs_tar()
    tag = f"mirbadllm-fake-vllm:{hashlib.sha256(rootfs).hexdigest()[:16]}"
    if docker_engine.cli("image", "inspect", tag).returncode != 0:
        done = docker_engine.cli("import", "-c", 'ENTRYPOINT ["/usr/bin/python3", "-S", "/fake_vllm_server.py"]',
                                 "-", tag, stdin=rootfs)
        assert done.returncode == 0, done.stderr.decode()
    return tag
