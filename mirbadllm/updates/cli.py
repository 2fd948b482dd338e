"""The release pipeline's command line: make a signing key, write the feed, sign files, check them.

    python -m mirbadllm.updates keygen --out release.key      # prints the public key to build in
    python -m mirbadllm.updates make-feed --version 0.2.0 --out dist/feed.json \\
        linux-x86_64-appimage=dist/MirbadLLM-0.2.0-x86_64.AppImage ...
    python -m mirbadllm.updates sums dist/                     # dist/SHA256SUMS
    python -m mirbadllm.updates sign --key release.key dist/feed.json dist/SHA256SUMS
    python -m mirbadllm.updates verify dist/feed.json [--public-key B64]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.releases.feed import (
    FEED_NAME,
    PLATFORMS,
    SIGNATURE_SUFFIX,
    SUMS_NAME,
    feed_bytes,
    make_feed,
    sha256sums_text,
)
from core.releases.signing import (
    RELEASE_PUBLIC_KEYS,
    SigningKeyError,
    private_key_pem,
    public_key_b64,
    sign_bytes,
    verify_feed_signature,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mirbadllm.updates", description="Sign MirbadLLM releases.")
    sub = parser.add_subparsers(dest="command", required=True)
    keygen = sub.add_parser("keygen", help="make an Ed25519 release key (PEM, 0600) and print its public key")
    keygen.add_argument("--out", type=Path, required=True)
    sign = sub.add_parser("sign", help="write FILE.sig (base64 Ed25519 signature) beside each FILE")
    sign.add_argument("--key", type=Path, required=True, help="private key: PEM or a raw 32-byte seed")
    sign.add_argument("files", type=Path, nargs="+")
    feed = sub.add_parser("make-feed", help="write the release feed for PLATFORM=FILE artefacts")
    feed.add_argument("--version", required=True)
    feed.add_argument("--channel", default="stable")
    feed.add_argument("--base-url", default="", help="absolute URL prefix (default: URLs relative to the feed)")
    feed.add_argument("--notes", default="")
    feed.add_argument("--out", type=Path, default=Path(FEED_NAME))
    feed.add_argument("--key", type=Path, help="also sign the feed with this key")
    feed.add_argument("artefacts", nargs="+", metavar="PLATFORM=FILE", help=f"platforms: {', '.join(PLATFORMS)}")
    sums = sub.add_parser("sums", help=f"write {SUMS_NAME} for every file in FOLDER")
    sums.add_argument("folder", type=Path)
    verify = sub.add_parser("verify", help="check FILE against FILE.sig")
    verify.add_argument("file", type=Path)
    verify.add_argument("--public-key", action="append", help="base64 public key (default: the built-in ones)")
    return parser


def _write_signature(path: Path, key: Path) -> Path:
    sig = path.with_name(path.name + SIGNATURE_SUFFIX)
    sig.write_bytes(sign_bytes(path.read_bytes(), key))
    return sig


def _keygen(out: Path) -> int:
    if out.exists():
        print(f"{out} exists; refusing to overwrite a release key", file=sys.stderr)
        return 1
    key = Ed25519PrivateKey.generate()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_key_pem(key))
    print(f"private key: {out} (keep it offline; never commit it)")
    print(f"public key (add to RELEASE_PUBLIC_KEYS in core/releases/signing.py): {public_key_b64(key)}")
    return 0


def _make_feed(args: argparse.Namespace) -> int:
    artefacts: dict[str, Path] = {}
    for item in args.artefacts:
        platform, sep, file = item.partition("=")
        if not sep or not Path(file).is_file():
            print(f"{item!r}: expected PLATFORM=FILE with an existing file", file=sys.stderr)
            return 2
        artefacts[platform] = Path(file)
    feed = make_feed(args.version, artefacts, channel=args.channel, base_url=args.base_url, notes=args.notes)
    args.out.write_bytes(feed_bytes(feed))
    print(f"wrote {args.out} ({len(feed.artefacts)} artefacts)")
    if args.key:
        print(f"wrote {_write_signature(args.out, args.key)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            return _keygen(args.out)
        if args.command == "sign":
            for path in args.files:
                print(f"wrote {_write_signature(path, args.key)}")
            return 0
        if args.command == "make-feed":
            return _make_feed(args)
        if args.command == "sums":
            out = args.folder / SUMS_NAME
            out.write_text(sha256sums_text(args.folder), encoding="utf-8")
            print(f"wrote {out}")
            return 0
        sig = args.file.with_name(args.file.name + SIGNATURE_SUFFIX)
        why = verify_feed_signature(args.file.read_bytes(), sig.read_bytes(), args.public_key or RELEASE_PUBLIC_KEYS)
        print(f"{args.file}: {why or 'signature OK'}", file=sys.stderr if why else sys.stdout)
        return 1 if why else 0
    except (SigningKeyError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
