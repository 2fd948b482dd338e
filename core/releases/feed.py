"""The release feed: one JSON document per channel, signed by the release key (``feed.json.sig``).

```json
{"format": 1, "product": "mirbadllm", "version": "0.2.0", "channel": "stable",
 "published": "2026-12-01T09:00:00Z",
 "artefacts": [{"platform": "linux-x86_64-appimage", "url": "MirbadLLM-0.2.0-x86_64.AppImage",
                "size": 104857600, "sha256": "<64 hex digits>"}]}
```

An artefact's ``url`` is relative to the feed's own URL or absolute. Unknown fields are ignored so
that a newer feed still reads; the signature covers every byte of the file either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from core.hashing import file_sha256

FEED_NAME = "feed.json"
# Where each release's signed feed is published (the release workflow's publish job attaches it to
# the GitHub release); the app checks it daily unless the user turns that off or sets another.
DEFAULT_FEED_URL = "https://github.com/mirbadllm/mirbadllm/releases/latest/download/feed.json"
SIGNATURE_SUFFIX = ".sig"
SUMS_NAME = "SHA256SUMS"

#: Every artefact the release pipeline builds, keyed as the feed names them.
PLATFORMS = (
    "linux-x86_64-deb",
    "linux-x86_64-appimage",
    "macos-arm64-dmg",
    "windows-x86_64-exe",
    "agent-linux-x86_64",
    "agent-linux-arm64",
    "agent-macos-arm64",
    "agent-windows-x86_64",
    # GPU runtime packs: llama.cpp with CUDA per driver line (daemon.runtimes.packs)
    "llamacpp-cuda13-linux-x86_64",
    "llamacpp-cuda12-linux-x86_64",
    "llamacpp-cuda13-windows-x86_64",
    "llamacpp-cuda12-windows-x86_64",
)


class ReleaseArtefact(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    platform: str = Field(description="Which build this is, one of PLATFORMS (unknown ones are skipped).")
    url: str = Field(min_length=1, description="Where to download it: relative to the feed, or absolute.")
    size: int = Field(gt=0, description="Exact size in bytes.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the file, lowercase hex.")


class ReleaseFeed(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    format: Literal[1] = 1
    product: Literal["mirbadllm"] = "mirbadllm"
    version: str = Field(description="The release's version (PEP 440, compared with packaging.version).")
    channel: str = Field(default="stable", min_length=1)
    published: AwareDatetime
    notes: str = ""
    artefacts: list[ReleaseArtefact]

    @field_validator("version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion as exc:
            raise ValueError(f"{value!r} is not a version number") from exc
        return value

    def artefact_for(self, platform: str) -> ReleaseArtefact | None:
        return next((a for a in self.artefacts if a.platform == platform), None)




def sha256sums_text(folder: Path) -> str:
    """``SHA256SUMS`` for every file in ``folder`` (sorted, ``sha256sum -c`` format).

    Hidden files and the sums file and its signature are left out.
    """
    lines = [f"{file_sha256(path)}  {path.name}\n" for path in sorted(folder.iterdir(), key=lambda p: p.name)
             if path.is_file() and not path.name.startswith(".") and not path.name.startswith(SUMS_NAME)]
    return "".join(lines)


def make_feed(version: str, artefacts: Mapping[str, Path], *, channel: str = "stable",
              base_url: str = "", published: datetime | None = None, notes: str = "") -> ReleaseFeed:
    """The feed for ``artefacts`` (platform → file); URLs are the file names, under ``base_url`` if given."""
    unknown = sorted(set(artefacts) - set(PLATFORMS))
    if unknown:
        raise ValueError(f"unknown platform {', '.join(unknown)}; use one of {', '.join(PLATFORMS)}")
    prefix = base_url.rstrip("/") + "/" if base_url else ""
    entries = [ReleaseArtefact(platform=platform, url=prefix + path.name, size=path.stat().st_size,
                               sha256=file_sha256(path)) for platform, path in artefacts.items()]
    return ReleaseFeed(version=version, channel=channel, notes=notes, artefacts=entries,
                       published=published or datetime.now(UTC).replace(microsecond=0))


def feed_bytes(feed: ReleaseFeed) -> bytes:
    """The bytes to publish (and sign): indented JSON, newline-terminated."""
    return (feed.model_dump_json(indent=2) + "\n").encode("utf-8")
