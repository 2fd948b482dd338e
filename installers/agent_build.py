"""The single-file agent build the daemon's rollouts push: ``dist/mirbadllm-agent-<version>-<os>-<arch>[.exe]``.

    python -m installers.agent_build --dist dist [--work build/agent]

freezes ``installers/pyinstaller/agent.spec`` with PyInstaller (one file, the agent and the core layer
only) and names it after its feed platform (``agent.api.upgrade.agent_platform``: ``agent-linux-x86_64``
and the like); it prints ``PLATFORM=PATH``, what ``installers.release_feed`` takes. ``make package``
builds it beside the .deb and lists it in the signed feed; the macOS and Windows jobs of
``.github/workflows/release.yml`` run this on their runners.
"""

from __future__ import annotations

import argparse
import os
import platform as platform_module
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from agent.api.upgrade import agent_platform

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "installers" / "pyinstaller" / "agent.spec"
NAME = "mirbadllm-agent"

Run = Callable[[list[str], dict[str, str]], None]


def _run(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run(argv, check=True, env=env)


def this_platform(system: str | None = None, machine: str | None = None) -> str:
    """This machine's agent platform key; a ValueError for a machine no agent build exists for."""
    system = system or platform_module.system()
    machine = machine or platform_module.machine()
    key = agent_platform(system, machine)
    if key is None:
        raise ValueError(f"no agent build for {system} {machine}")
    return key


def file_name(version: str, key: str) -> str:
    """``mirbadllm-agent-0.1.0-linux-x86_64`` (``.exe`` on Windows)."""
    suffix = ".exe" if key.startswith("agent-windows") else ""
    return f"{NAME}-{version}-{key.removeprefix('agent-')}{suffix}"


def build(dist: Path, work: Path, version: str, key: str | None = None, run: Run = _run) -> tuple[str, Path]:
    """Freeze the agent into ``dist`` under its release name; returns its platform key and path."""
    key = key or this_platform()
    frozen = work / "dist"
    started = time.monotonic()
    run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN", "--distpath", str(frozen),
         "--workpath", str(work / "pyinstaller"), str(SPEC)], dict(os.environ))
    built = frozen / (NAME + (".exe" if key.startswith("agent-windows") else ""))
    if not built.is_file():
        raise FileNotFoundError(f"PyInstaller made no {built.name} in {frozen}")
    dist.mkdir(parents=True, exist_ok=True)
    target = dist / file_name(version, key)
    os.replace(built, target)
    print(f"froze the agent ({target.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s",
          flush=True)
    return key, target


def main(argv: Sequence[str] | None = None) -> int:
    import importlib.metadata

    parser = argparse.ArgumentParser(prog="python -m installers.agent_build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "agent")
    args = parser.parse_args(argv)
    try:
        key, path = build(args.dist, args.work, importlib.metadata.version("mirbadllm"))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{key}={path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
