"""``make package``: freeze MirbadLLM with PyInstaller and package it for this OS.

On Linux: ``dist/mirbadllm_<version>_amd64.deb`` and ``dist/SHA256SUMS``, plus
``dist/SHA256SUMS.sig`` (Ed25519, detached) when ``MIRBADLLM_SIGNING_KEY`` names a private key
file; every artefact is then checked against the feed the app trusts. The macOS and Windows
packages are built by the CI workflows in ``.github/workflows/`` with the same spec.

    python -m installers.package --dist dist [--runtime DIR] [--skip-freeze]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from installers import linux_deb

_LOGGER = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "installers" / "pyinstaller" / "mirbadllm.spec"
SIGNING_KEY_ENV = "MIRBADLLM_SIGNING_KEY"


def product_version() -> str:
    return importlib.metadata.version("mirbadllm")


def sha256sums_text(files: Sequence[Path]) -> str:
    """``<sha256>  <name>`` lines, sorted by name, as ``sha256sum -c`` reads them."""
    lines = []
    for path in sorted(files, key=lambda p: p.name):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        lines.append(f"{digest.hexdigest()}  {path.name}\n")
    return "".join(lines)


def freeze(runtime: Path | None, work: Path, dist: Path) -> Path:
    env = dict(os.environ)
    if runtime is not None:
        env["MIRBADLLM_RUNTIME_DIR"] = str(runtime)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                    "--distpath", str(dist), "--workpath", str(work / "pyinstaller"), str(SPEC)],
                   check=True, env=env)
    print(f"froze mirbadllm in {time.monotonic() - started:.0f} s", flush=True)
    return dist / "mirbadllm"


def sign_file(path: Path, key_file: Path) -> Path:
    """A detached Ed25519 signature beside ``path`` (``.sig``), through the update module's signer."""
    from mirbadllm.updates import cli as updates_cli

    code = updates_cli.main(["sign", "--key", str(key_file), str(path)])
    if code != 0:
        raise RuntimeError(f"signing {path} failed")
    return path.with_name(path.name + ".sig")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installers.package", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "package")
    parser.add_argument("--runtime", type=Path, default=None, help="the `make runtime` folder to bundle")
    parser.add_argument("--skip-freeze", action="store_true", help="package the frozen folder already in --work")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not sys.platform.startswith("linux"):
        print("error: `make package` builds the Linux packages; macOS and Windows are built by the CI "
              "workflows (.github/workflows)", file=sys.stderr)
        return 2
    version = product_version()
    frozen_root = args.work / "frozen"
    frozen = frozen_root / "mirbadllm" if args.skip_freeze else freeze(args.runtime, args.work, frozen_root)
    if not (frozen / "mirbadllm").is_file():
        print(f"error: no frozen program in {frozen}", file=sys.stderr)
        return 1
    started = time.monotonic()
    deb = linux_deb.build_deb(frozen, ROOT / "resources", args.dist, version, platform.machine(), args.work)
    print(f"built {deb} ({deb.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s", flush=True)
    artefacts = [deb]
    sums = args.dist / "SHA256SUMS"
    sums.write_text(sha256sums_text(artefacts))
    print(f"wrote {sums}")
    key = os.environ.get(SIGNING_KEY_ENV)
    if key:
        print(f"signed: {sign_file(sums, Path(key))}")
    else:
        print(f"not signed: set {SIGNING_KEY_ENV} to an Ed25519 private key file to sign SHA256SUMS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
