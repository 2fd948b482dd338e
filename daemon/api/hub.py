"""Contracts of Discover: searching the Hugging Face hub, a repository's GGUF files by quant, and the
curated catalog with its short names (``gemma3:1b``).

The daemon asks the hub (``daemon.sources.hub``) and answers these; the app's Discover page, ``ctl
models search|files|pull NAME`` and ``mirbadllm run NAME`` read them through ``DaemonClient``.
``resolve_short_name`` is the one place a short name becomes a repository and a file.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from agent.api.sources import HfFileRef

HubFormat = Literal["gguf", "mlx", "safetensors"]
HUB_FORMATS: tuple[HubFormat, ...] = ("gguf", "mlx", "safetensors")
MAX_SEARCH_LIMIT = 100
SHORT_NAME_PATTERN = r"^[a-z0-9][a-z0-9.\-]*:[a-z0-9][a-z0-9.\-]*$"
_SHORT_NAME = re.compile(SHORT_NAME_PATTERN)

# Machine size classes of the catalog: the memory a model gets (GPU memory, or system memory on a
# machine without a discrete GPU or with unified memory), as (id, title, upper bound in GB or None).
MACHINE_CLASSES: tuple[tuple[str, str, int | None], ...] = (
    ("8gb", "up to 8 GB", 8), ("16gb", "8–16 GB", 16), ("32gb", "16–32 GB", 32), ("more", "32 GB and more", None))
MachineClass = Literal["8gb", "16gb", "32gb", "more"]


class HubRepo(BaseModel):
    """One repository a search found."""

    id: str = Field(description="owner/name on the hub.")
    downloads: int = Field(default=0, description="Downloads over the last 30 days, as the hub counts them.")
    likes: int = 0
    updated: datetime | None = Field(default=None, description="The hub's lastModified.")
    gated: bool = Field(default=False, description="Its files need an accepted license and a token (HF_TOKEN).")
    pipeline_tag: str | None = None


class HubSearchResult(BaseModel):
    query: str
    format: HubFormat
    repos: list[HubRepo] = Field(default_factory=list, description="Most downloaded first.")
    message: str | None = Field(default=None, description="Said when nothing matched, and what to try.")


class HubFile(BaseModel):
    path: str
    size: int


class QuantVariant(BaseModel):
    """One GGUF model of a repository: a quant, its file (the first shard when split) and all its parts."""

    quant: str = Field(description="Q4_K_M, Q8_0, BF16...; the file's name when it names none.")
    file: str = Field(description="The file to download (the first shard: the others come with it).")
    files: list[HubFile] = Field(description="Every file of this model (its shards, in order).")
    size: int = Field(description="Bytes, all shards together.")

    def ref(self, repo: str) -> HfFileRef:
        return HfFileRef(repo=repo, file=self.file)


class HubRepoFiles(BaseModel):
    repo: str
    downloads: int = 0
    likes: int = 0
    updated: datetime | None = None
    gated: bool = False
    quants: list[QuantVariant] = Field(description="Smallest first.")
    projectors: list[HubFile] = Field(default_factory=list,
                                      description="Vision projectors (mmproj-*.gguf); downloaded with the model.")
    note: str | None = Field(default=None, description="What to know before downloading (gated: the token).")


class CatalogEntry(BaseModel):
    """A curated model: an instruction-tuned GGUF, its file and why it is in the list."""

    name: str = Field(pattern=SHORT_NAME_PATTERN, description="The short name: family:size, e.g. gemma3:1b.")
    title: str = Field(min_length=1, max_length=80)
    repo: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*$")
    file: str = Field(pattern=r"^[^/\\]+\.gguf$", description="The GGUF (the first shard when split).")
    quant: str = Field(min_length=1, max_length=16)
    size: int = Field(gt=0, description="Bytes of the model's files, as the hub lists them (approximately).")
    machine: MachineClass = Field(description="The smallest machine class it is picked for.")
    why: str = Field(min_length=1, max_length=160, description="One line on why it is worth running.")
    vision: bool = Field(default=False, description="The repo has a vision projector, downloaded with it.")

    def ref(self) -> HfFileRef:
        return HfFileRef(repo=self.repo, file=self.file)

    @property
    def model_id(self) -> str:
        """The id it is registered as (served as its short name): ``llama3.2:3b`` -> ``llama3-2-3b``."""
        return model_id_of(self.name)


CatalogFitState = Literal["fits", "tight", "too_big", "unknown"]


class CatalogItem(CatalogEntry):
    """A catalog entry with whether it fits this machine (the daemon's own node, ``local``)."""

    fit: CatalogFitState = "unknown"
    fit_note: str = ""


class CatalogView(BaseModel):
    entries: list[CatalogItem]
    memory: int | None = Field(default=None, description="The memory judged against: bytes of the local node's "
                                                          "GPUs together, or its system memory; None: not known yet.")
    memory_kind: Literal["gpu", "system", "unknown"] = "unknown"


def model_id_of(short_name: str) -> str:
    """A short name as a model id: ``llama3.2:3b`` -> ``llama3-2-3b``."""
    return re.sub(r"[^a-z0-9-]+", "-", short_name.lower()).strip("-")[:40]


def is_short_name(text: str) -> bool:
    """``gemma3:1b``: no '/', a family and a tag (``owner/repo:QUANT`` has a '/')."""
    return bool(_SHORT_NAME.match(text.lower()))


def resolve_short_name(entries: list[CatalogItem] | list[CatalogEntry], name: str) -> CatalogEntry | None:
    """The catalog entry of a short name (any case); None when the catalog has none."""
    wanted = name.lower()
    return next((e for e in entries if e.name == wanted), None)


__all__ = ["HUB_FORMATS", "MACHINE_CLASSES", "MAX_SEARCH_LIMIT", "SHORT_NAME_PATTERN", "CatalogEntry",
           "CatalogFitState", "CatalogItem", "CatalogView", "HubFile", "HubFormat", "HubRepo", "HubRepoFiles",
           "HubSearchResult", "MachineClass", "QuantVariant", "is_short_name", "model_id_of", "resolve_short_name"]
