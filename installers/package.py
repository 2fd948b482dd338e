"""``make package``: freeze MirbadLLM with PyInstaller and package it for this OS.

On Linux: ``dist/mirbadllm_<version>_amd64.deb``, ``dist/MirbadLLM-<version>-x86_64.AppImage``,
the single-file agent build the daemon's rollouts push (``dist/mirbadllm-agent-<version>-linux-x86_64``,
``installers.agent_build``), ``dist/SHA256SUMS`` and the release feed
``dist/feed.json`` (the update checker's format, ``app.updates``); with
``MIRBADLLM_SIGNING_KEY`` naming an Ed25519 private key file, also the detached signatures
``SHA256SUMS.sig`` and ``feed.json.sig`` that the app verifies against its built-in key. The macOS
and Windows packages are built by ``.github/workflows/release.yml`` with the same spec.

    python -m installers.package --dist dist [--runtime DIR] [--skip-freeze] [--no-agent]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from core.hashing import file_sha256
from core.releases.feed import (
    FEED_NAME,
    SUMS_NAME,
    feed_bytes,
    make_feed,
)
from core.releases.signing import (
    BUNDLED_KEYS_FILE,
    load_private_key_file,
    public_key_b64,
    sign_bytes,
)
from installers import agent_build, appimage, linux_deb

_LOGGER = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "installers" / "pyinstaller" / "mirbadllm.spec"
SIGNING_KEY_ENV = "MIRBADLLM_SIGNING_KEY"


def product_version() -> str:
    return importlib.metadata.version("mirbadllm")


def sha256sums_text(files: Sequence[Path]) -> str:
    """``<sha256>  <name>`` lines for these artefacts (not the whole folder), as ``sha256sum -c`` reads."""
    return "".join(f"{file_sha256(path)}  {path.name}\n" for path in sorted(files, key=lambda p: p.name))


def release_keys_file(key_file: Path, work: Path) -> Path:
    """The public half of the signing key, for the frozen build to trust (``bundled_release_keys``)."""
    public = public_key_b64(load_private_key_file(key_file))
    out = work / BUNDLED_KEYS_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"keys": [public]}) + "\n")
    return out


def freeze(runtime: Path | None, work: Path, dist: Path, keys: Path | None = None) -> Path:
    env = dict(os.environ)
    if runtime is not None:
        env["MIRBADLLM_RUNTIME_DIR"] = str(runtime.resolve())  # the spec resolves paths from its own folder
    if keys is not None:
        env["MIRBADLLM_RELEASE_KEYS_FILE"] = str(keys)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                    "--distpath", str(dist), "--workpath", str(work / "pyinstaller"), str(SPEC)],
                   check=True, env=env)
    print(f"froze mirbadllm in {time.monotonic() - started:.0f} s", flush=True)
    return dist / "mirbadllm"


def sign_file(path: Path, key_file: Path) -> Path:
    """A detached Ed25519 signature beside ``path`` (``FILE.sig``), as the update checker reads it."""
    signature = path.with_name(path.name + ".sig")
    signature.write_bytes(sign_bytes(path.read_bytes(), key_file))
    return signature


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installers.package", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "package")
    parser.add_argument("--runtime", type=Path, default=None, help="the `make runtime` folder to bundle")
    parser.add_argument("--skip-freeze", action="store_true", help="package the frozen folder already in --work")
    parser.add_argument("--no-agent", action="store_true", help="without the single-file agent build")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not sys.platform.startswith("linux"):
        print("error: `make package` builds the Linux packages; macOS and Windows are built by the CI "
              "workflows (.github/workflows)", file=sys.stderr)
        return 2
    version = product_version()
    frozen_root = args.work / "frozen"
    key = os.environ.get(SIGNING_KEY_ENV)
    keys = release_keys_file(Path(key), args.work) if key else None
    frozen = frozen_root / "mirbadllm" if args.skip_freeze else freeze(args.runtime, args.work, frozen_root, keys)
    if not (frozen / "mirbadllm").is_file():
        print(f"error: no frozen program in {frozen}", file=sys.stderr)
        return 1
    started = time.monotonic()
    deb = linux_deb.build_deb(frozen, ROOT / "resources", args.dist, version, platform.machine(), args.work)
    print(f"built {deb} ({deb.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    machine = platform.machine()
    try:
        image = appimage.build_appimage(frozen, "mirbadllm", ROOT / "resources" / "icons" / "png" / "app-256.png",
                                        args.dist / appimage.appimage_name(version, machine), args.work)
    except appimage.AppImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"built {image} ({image.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s", flush=True)
    artefacts = {"linux-x86_64-deb": deb, "linux-x86_64-appimage": image}
    if not args.no_agent:  # what the daemon's rollouts push to a node (daemon.upgrades)
        try:
            platform_key, agent = agent_build.build(args.dist, args.work / "agent", version)
        except (ValueError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        artefacts[platform_key] = agent
    write_release(args.dist, version, artefacts, sha256sums_text(list(artefacts.values())), key)
    return 0


def write_release(dist: Path, version: str, artefacts: dict[str, Path], sums_text: str, key: str | None) -> None:
    """``SHA256SUMS`` and ``feed.json`` in ``dist``, each signed (``.sig``) when ``key`` names the
    release key (``make package``, and ``installers.release_feed`` for the whole release)."""
    sums = dist / SUMS_NAME
    sums.write_text(sums_text)
    feed = dist / FEED_NAME
    feed.write_bytes(feed_bytes(make_feed(version, artefacts)))
    print(f"wrote {feed} ({len(artefacts)} artefacts) and {sums}")
    if key:
        for path in (sums, feed):
            print(f"signed: {sign_file(path, Path(key))}")
    else:
        print(f"not signed: set {SIGNING_KEY_ENV} to an Ed25519 private key file to sign {SUMS_NAME} and the feed")


if __name__ == "__main__":
    raise SystemExit(main())
