"""A repository's GGUF files as models by quant: the quant read from a file's name, shards grouped.

``Qwen3-8B-Q4_K_M.gguf`` is one model (Q4_K_M); ``model-Q8_0-00001-of-00002.gguf`` and its second part
are one (Q8_0, downloaded by naming the first part: the agent fetches the others with it);
``mmproj-*.gguf`` is a vision projector, not a model. A name with no known quant keeps its file
name as its label, so nothing in the repository is hidden.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from daemon.api.hub import HubFile, QuantVariant

_LOGGER = logging.getLogger(__name__)

_SHARD = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# llama.cpp's quant names: Q4_K_M, IQ2_XXS, Q4_0_4_4, UD-Q4_K_XL (as Q4_K_XL), BF16, F16, F32, MXFP4, TQ1_0.
_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Za-z0-9]{1,3})*|BF16|F16|F32|MXFP4|TQ\d_\d)(?![A-Za-z0-9])",
                    re.IGNORECASE)


def is_projector(path: str) -> bool:
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def quant_of(path: str) -> str | None:
    """The quant a GGUF's name (else its folder's) says, upper-cased; None when it names none."""
    name = path.rsplit("/", 1)[-1]
    shard = _SHARD.match(name)
    stem = shard["stem"] if shard else name[: -len(".gguf")] if name.lower().endswith(".gguf") else name
    for text in (stem, path.rsplit("/", 1)[0] if "/" in path else ""):
        found = _QUANT.findall(text)
        if found:
            return str(found[-1]).upper()  # the last one: "Q8_0-imat" in "llama-q2-Q8_0" style names
    return None


def _group_key(path: str) -> tuple[str, int, int]:
    """The model a file belongs to (its name without the shard suffix), its part and the part count."""
    folder, _, name = path.rpartition("/")
    shard = _SHARD.match(name)
    if shard is None:
        return path, 1, 1
    return f"{folder}/{shard['stem']}" if folder else shard["stem"], int(shard["part"]), int(shard["count"])


def group_ggufs(files: Iterable[HubFile]) -> tuple[list[QuantVariant], list[HubFile]]:
    """The models (smallest first) and the vision projectors among a repository's files. A split
    model with a part missing is left out: the download would fail on it."""
    groups: dict[str, list[tuple[int, int, HubFile]]] = {}
    projectors: list[HubFile] = []
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        if is_projector(f.path):
            projectors.append(f)
            continue
        key, part, count = _group_key(f.path)
        groups.setdefault(key, []).append((part, count, f))
    variants = []
    for key, parts in groups.items():
        parts.sort(key=lambda p: p[0])
        count = parts[0][1]
        if [p[0] for p in parts] != list(range(1, count + 1)):
            _LOGGER.info("hub: %s is split in %d parts and some are missing; left out", key, count)
            continue
        shards = [p[2] for p in parts]
        variants.append(QuantVariant(quant=quant_of(shards[0].path) or shards[0].path.rsplit("/", 1)[-1],
                                     file=shards[0].path, files=shards, size=sum(s.size for s in shards)))
    variants.sort(key=lambda v: (v.size, v.file))
    return variants, sorted(projectors, key=lambda p: p.path)
