"""The .deb `make package` built, installed for real: its daemon serves a GGUF on /v1, then it is
removed and leaves nothing behind. Runs where a .deb was built (``make test-package``) as root."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _deb() -> Path | None:
    named = os.environ.get("MIRBADLLM_TEST_DEB")
    if named:
        return Path(named)
    built = sorted((ROOT / "dist").glob("mirbadllm_*.deb"))
    return built[-1] if built else None


@pytest.fixture(scope="module")
def installed() -> Path:
    deb = _deb()
    if deb is None or not deb.is_file():
        pytest.skip("no .deb built (make package)")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("installing a .deb needs root and apt")
    subprocess.run(["apt-get", "install", "-y", "-q", "--reinstall", str(deb.absolute())], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return Path("/usr/bin/mirbadllm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, body: dict | None = None, timeout: float = 120) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def test_the_installed_program_serves_a_gguf_and_is_removed_without_a_trace(
        installed: Path, tmp_path: Path, gemma_gguf: Path) -> None:
    home = tmp_path / "home"  # outside the checkout: nothing of the source tree is used
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MIRBADLLM_HOME": str(home), "MIRBADLLM_NO_MDNS": "1"}
    port = _free_port()
    with open(tmp_path / "daemon.log", "wb") as log:
        daemon = subprocess.Popen([str(installed), "daemon", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert _get(f"http://127.0.0.1:{port}/healthz", timeout=2)["status"] == "ok"
                break
            except OSError:
                assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
                assert time.monotonic() < deadline, "the installed daemon never answered /healthz"
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}"
        ctl = [str(installed), "ctl", "--url", url]
        subprocess.run([*ctl, "models", "add", "gem", str(gemma_gguf), "--ctx-size", "1024"], env=env, check=True)
        subprocess.run([*ctl, "models", "start", "gem", "--wait"], env=env, check=True, timeout=180)
        answer = _get(f"{url}/v1/completions", {"model": "gem", "prompt": "Paris is", "max_tokens": 4})
        assert answer["choices"][0]["text"] and answer["usage"]["completion_tokens"] > 0
        status = subprocess.run([*ctl, "status"], env=env, check=True, capture_output=True, text=True).stdout
        assert "gem" in status and "ready" in status
        checks = json.loads((home / "agent" / "runtime-checks.json").read_text())["checks"]
        (check,) = checks.values()
        assert check["verdict"] == "ok" and check["executable"].startswith("/opt/mirbadllm/")
        subprocess.run([*ctl, "models", "stop", "gem"], env=env, check=True)
    finally:
        daemon.terminate()
        daemon.wait(30)
    subprocess.run(["apt-get", "purge", "-y", "-q", "mirbadllm"], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    left = [p for p in ("/opt/mirbadllm", "/usr/bin/mirbadllm", "/usr/share/applications/mirbadllm.desktop",
                        "/usr/lib/systemd/system/mirbadllm-agent.service", "/var/lib/mirbadllm-agent")
            if os.path.lexists(p)]
    assert left == []
    assert subprocess.run(["getent", "passwd", "mirbadllm-agent"], capture_output=True, check=False).returncode == 2
