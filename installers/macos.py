"""macOS: sign the frozen ``MirbadLLM.app`` (Developer ID, hardened runtime), wrap it in a ``.dmg``,
notarize and staple it. Run by ``.github/workflows/release.yml`` on a macOS runner; the argument
lists are pure functions so the tests here assert them exactly.

    python -m installers.macos --app dist/MirbadLLM.app --version 0.1.0 --out dist
      (MIRBADLLM_CODESIGN_IDENTITY, MIRBADLLM_NOTARY_PROFILE from the CI secrets)
"""

from __future__ import annotations

import argparse
import logging
import os
import plistlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
ENTITLEMENTS = ROOT / "installers" / "entitlements.plist"  # committed; a test keeps it as rendered
IDENTITY_ENV = "MIRBADLLM_CODESIGN_IDENTITY"  # "Developer ID Application: ... (TEAMID)"
NOTARY_PROFILE_ENV = "MIRBADLLM_NOTARY_PROFILE"  # a `notarytool store-credentials` profile


def entitlements() -> dict[str, bool]:
    """What the hardened runtime must allow: Python's frozen code is not library-validated, and the
    bundled llama-server maps its model files and JITs nothing."""
    return {
        "com.apple.security.cs.allow-unsigned-executable-memory": True,
        "com.apple.security.cs.disable-library-validation": True,
        "com.apple.security.network.client": True,
        "com.apple.security.network.server": True,
    }


def entitlements_plist() -> bytes:
    return plistlib.dumps(entitlements(), fmt=plistlib.FMT_XML)


def dmg_name(version: str, machine: str = "arm64") -> str:
    return f"MirbadLLM-{version}-{machine}.dmg"


def codesign_argv(path: Path, identity: str, entitlements_file: Path = ENTITLEMENTS) -> list[str]:
    return ["codesign", "--force", "--timestamp", "--options", "runtime", "--entitlements", str(entitlements_file),
            "--sign", identity, str(path)]


def sign_plan(app: Path, identity: str) -> list[list[str]]:
    """Inside out: every Mach-O binary and library first (the runtime's llama-server and dylibs
    included), then the bundle; ``codesign --deep`` is not used because it signs without the
    entitlements and in the wrong order."""
    inner = sorted(p for p in app.rglob("*") if p.is_file() and (p.suffix in (".dylib", ".so") or os.access(p, os.X_OK))
                   and p.parent.name != "MacOS")
    return [codesign_argv(p, identity) for p in inner] + [codesign_argv(app, identity)]


def dmg_argv(app: Path, out: Path, volume: str = "MirbadLLM") -> list[str]:
    return ["hdiutil", "create", "-volname", volume, "-srcfolder", str(app), "-ov", "-format", "UDZO", str(out)]


def notarize_argv(dmg: Path, profile: str) -> list[str]:
    return ["xcrun", "notarytool", "submit", str(dmg), "--keychain-profile", profile, "--wait"]


def staple_argv(dmg: Path) -> list[str]:
    return ["xcrun", "stapler", "staple", str(dmg)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installers.macos")
    parser.add_argument("--app", type=Path, required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--machine", default="arm64")
    args = parser.parse_args(argv)
    identity = os.environ.get(IDENTITY_ENV)
    profile = os.environ.get(NOTARY_PROFILE_ENV)
    ENTITLEMENTS.parent.mkdir(parents=True, exist_ok=True)
    ENTITLEMENTS.write_bytes(entitlements_plist())
    if identity:
        for step in sign_plan(args.app, identity):
            subprocess.run(step, check=True)
    else:
        print(f"not signed: {IDENTITY_ENV} is not set (an unsigned build for testing)")
    dmg = args.out / dmg_name(args.version, args.machine)
    subprocess.run(dmg_argv(args.app, dmg), check=True)
    if identity and profile:
        subprocess.run(codesign_argv(dmg, identity), check=True)
        subprocess.run(notarize_argv(dmg, profile), check=True)
        subprocess.run(staple_argv(dmg), check=True)
    else:
        print(f"not notarized: {NOTARY_PROFILE_ENV} is not set")
    print(dmg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
