"""The release's one feed: every artefact the release workflow built, listed in a signed feed.json.

    python -m installers.release_feed --dist dist PLATFORM=FILE ...

PLATFORM is one of the feed's platforms (``core.releases.feed.PLATFORMS``): the installers,
the agent builds and the GPU runtime packs (``llamacpp-cuda13-linux-x86_64`` and the like, which
the daemon fetches for a node with an NVIDIA GPU: ``daemon.runtimes.packs``). The files are copied
into ``--dist`` beside ``feed.json`` and ``SHA256SUMS``; both are signed when
``MIRBADLLM_SIGNING_KEY`` names the Ed25519 release key.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from core.releases.feed import PLATFORMS, sha256sums_text
from installers.package import SIGNING_KEY_ENV, product_version, write_release


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installers.release_feed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, required=True, help="where the feed and the files go")
    parser.add_argument("--version", default=None, help="the release's version (default: this checkout's)")
    parser.add_argument("artefacts", nargs="+", metavar="PLATFORM=FILE")
    args = parser.parse_args(argv)
    artefacts: dict[str, Path] = {}
    for item in args.artefacts:
        platform, _, file = item.partition("=")
        if platform not in PLATFORMS or not file:
            print(f"error: {item!r}: give PLATFORM=FILE, PLATFORM one of {', '.join(PLATFORMS)}", file=sys.stderr)
            return 2
        if not Path(file).is_file():
            print(f"error: {file}: no such file", file=sys.stderr)
            return 2
        artefacts[platform] = Path(file)
    args.dist.mkdir(parents=True, exist_ok=True)
    placed = {}
    for platform, file in artefacts.items():
        target = args.dist / file.name
        if target.resolve() != file.resolve():
            shutil.copy2(file, target)
        placed[platform] = target
    write_release(args.dist, args.version or product_version(), placed, sha256sums_text(args.dist),
                  os.environ.get(SIGNING_KEY_ENV))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
