"""Runtime builds both sides agree on: what a model's pin means, and how a llama.cpp build is pushed.

**A pin** (``ModelDefinition.runtime_version`` → ``LaunchSpec.runtime_version``) names the runtime
a model must run on. It matches a node's ``RuntimeOffer`` for the model's runtime when it is

- the offer's ``version``, or its first word (llama.cpp: the binary's own build, ``b4589``, or
  where it knows none, the version in the build's ``runtime.json``, ``11434.0.0``; the commit in
  ``b4589 (1d1e6a90)`` too; vLLM: the image's version; MLX: mlx-lm's version), or
- a prefix of the offer's ``digest``, at least ``MIN_DIGEST_PREFIX`` hex digits, with or without
  ``sha256:`` (llama.cpp: the build's fingerprint, SHA-256 over ``llama-server`` and the ggml/llama
  libraries beside it, ``agent.runtimes.checks``; vLLM: the image digest).

The version says "this release of llama.cpp"; the digest says "exactly these bytes" (two builds of
one version with other flags differ). A node whose runtime does not match refuses the start with
409 ``runtime_version_mismatch`` naming both (``pin_mismatch``).

**A build rollout** (``POST /agent/v1/runtimes/llamacpp``): the body is a gzip'd tar of one build
folder (``llamacpp-<version>-<key>/`` as ``make runtime`` writes it: ``runtime.json``, ``bin/...``),
streamed over the daemon's mutual TLS; the query is a ``LlamaCppBuildOffer`` (the folder's name,
its version, the archive's exact size and SHA-256, and the model file the smoke generation loads).
The agent answers ``LlamaCppBuildAnswer`` once the build is unpacked beside the old one, every
file matched its manifest's SHA-256 and one token was generated with it; only then is it the
agent's preferred llama.cpp build. Any failure removes the new folder and keeps the old build.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent.api.runtimes import RUNTIME_LABELS, RuntimeOffer

MIN_DIGEST_PREFIX = 8
RUNTIME_BUILD_PATH = "/runtimes/llamacpp"
MAX_BUILD_BYTES = 2 << 30  # the archive; a llama.cpp CPU build is ~50 MB, with CUDA a few hundred
MAX_UNPACKED_BYTES = 6 << 30
BUILD_NAME_PATTERN = r"^llamacpp-[0-9A-Za-z.+_-]{1,100}$"


def pin_matches(pin: str, offer: RuntimeOffer) -> bool:
    """Whether ``offer`` is the runtime ``pin`` names (see the module text)."""
    wanted = pin.strip()
    if not wanted or not offer.available:
        return False
    if wanted in version_words(offer.version):
        return True
    prefix = wanted.lower().removeprefix("sha256:")
    digest = (offer.digest or "").lower().removeprefix("sha256:")
    return (len(prefix) >= MIN_DIGEST_PREFIX and all(c in "0123456789abcdef" for c in prefix)
            and digest.startswith(prefix))


def version_words(version: str | None) -> set[str]:
    """What a pin may say for an offered version: ``b4589 (1d1e6a90)`` -> itself, ``b4589``,
    ``1d1e6a90``; ``11434.0.0 (runtime.json)`` -> itself and ``11434.0.0``."""
    if not version:
        return set()
    head, _, rest = version.partition(" (")
    words = {version, head}
    inner = rest.removesuffix(")")
    if inner and inner != "runtime.json" and " " not in inner:
        words.add(inner)
    return words


def describe_offer(offer: RuntimeOffer) -> str:
    """'llama.cpp 11434.0.0 (digest 1a2b3c4d5e6f)', or why it is unavailable."""
    label = RUNTIME_LABELS.get(offer.runtime, offer.runtime)
    if not offer.available:
        return f"no {label} ({offer.reason or 'unavailable'})"
    digest = (offer.digest or "").removeprefix("sha256:")[:12]
    return f"{label} {offer.version or 'of unknown version'}" + (f" (digest {digest})" if digest else "")


def pin_mismatch(pin: str, offer: RuntimeOffer) -> str | None:
    """The refusal's text when ``offer`` is not what ``pin`` names, else None."""
    if pin_matches(pin, offer):
        return None
    return (f"this node runs {describe_offer(offer)}, the model is pinned to {pin}: roll that build out "
            "to this node (POST /api/nodes/runtime-upgrade) or change the model's runtime_version")


class LlamaCppBuildOffer(BaseModel):
    """What the pushed archive must be, and how to smoke-test it; sent as query parameters."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=BUILD_NAME_PATTERN, description="The build folder's name, llamacpp-<version>-<key>.")
    version: str = Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z.+!_-]+$",
                         description="The version in the build's runtime.json.")
    size: int = Field(gt=0, le=MAX_BUILD_BYTES, description="Exact size of the archive in bytes.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the archive.")
    smoke_model: str = Field(min_length=1, max_length=4096,
                             description="A GGUF file on the node the new build loads for its one-token smoke test.")


class LlamaCppBuildAnswer(BaseModel):
    """The build passed every check and its smoke test and is now the node's preferred llama.cpp."""

    name: str
    version: str
    digest: str = Field(description="The installed build's fingerprint (what a pin's digest prefix matches).")
    previous: str | None = Field(default=None, description="The build it replaced, kept beside it.")
    smoke: str = Field(description="What the smoke test saw.")
    already: bool = Field(default=False, description="It was the preferred build already; nothing changed.")
