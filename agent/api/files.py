"""The model files in a node's models folder, and removing one of them.

Spoken on ``/agent/v1`` (see ``AgentClient``); the agent's side is ``agent.files``:

    GET    /files              -> NodeFiles     # every file under the models folder, and the disk's space
    DELETE /files              -> FileRemoved   # ?path=P (or body: FileRemoval); one file, never a folder

Only files under the agent's models folder (``AgentPaths.models_dir``: downloads, mirrors, Ollama
imports, the demo model) are listed or removed. A file elsewhere (a model registered where it lies,
in LM Studio's folder or the user's own) belongs to its owner: the agent refuses to delete it
(403 ``outside_models_folder``), as it refuses a link leading out of the folder (the same code),
a folder or anything but a plain file (422 ``not_a_file``), a file a running instance reads (its
model, an adapter, a projector or draft model: 409 ``file_in_use``, the instances in ``details``)
and a file that is not there (404 ``file_not_found``). Hidden files (a download's or a mirror's
partial file) are the transfers' own and are neither listed nor removed (409 ``file_in_transfer``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from agent.api.launch_policy import PATH_FLAGS

FILES_PATH = "/files"
FileRole = Literal["model", "adapter", "projector", "draft", "file"]

# llama-server's flags that name a file, by what the file is to the model (the rest: "file").
PROJECTOR_FLAGS = frozenset({"-mm", "--mmproj"})
DRAFT_FLAGS = frozenset({"-md", "--model-draft", "--spec-draft-model"})
ADAPTER_FLAGS = frozenset({"--lora", "--lora-scaled"})
MODEL_FLAGS = frozenset({"-m", "--model"})
_SCALED = frozenset({"--lora-scaled", "--control-vector-scaled"})
_LISTS = frozenset({"--lora", "--control-vector"})


class NodeFile(BaseModel):
    """One file under the models folder."""

    path: str = Field(description="Absolute, on the node, as the models folder spells it.")
    size: int = Field(ge=0, description="Bytes.")
    mtime: float = Field(description="Last modified, seconds since the epoch.")
    links: int = Field(default=1, ge=1, description="Hard links to its bytes (an Ollama import shares them with "
                       "Ollama's store): removing it frees its size only when this is 1.")


class NodeFiles(BaseModel):
    """Every file under the node's models folder, largest first, and the space of the disk it is on."""

    models_dir: str
    files: list[NodeFile] = Field(default_factory=list)
    disk_total: int = Field(ge=0, description="Bytes of the disk that holds the models folder.")
    disk_free: int = Field(ge=0, description="Bytes free on it.")


class FileRemoval(BaseModel):
    """Which file to remove (the body of ``DELETE /files``, when the path is not in the query)."""

    path: str = Field(min_length=1, max_length=4096)


class FileRemoved(BaseModel):
    """A file removed, the bytes it gave back and the emptied folders removed after it."""

    path: str
    size: int
    freed: int = Field(description="Bytes given back to the disk: its size, or 0 when another hard link "
                       "still holds them.")
    folders_removed: list[str] = Field(default_factory=list)


def role_of(flag: str) -> FileRole:
    """What a file named by ``flag`` is to its model: model, adapter, projector, draft or file."""
    if flag in MODEL_FLAGS:
        return "model"
    if flag in ADAPTER_FLAGS:
        return "adapter"
    if flag in PROJECTOR_FLAGS:
        return "projector"
    return "draft" if flag in DRAFT_FLAGS else "file"


def files_in_args(args: Iterable[str]) -> list[tuple[str, FileRole]]:
    """Each file llama-server's arguments name (``--mmproj P``, ``--lora=A,B``, ``-m P``...), with
    its role (``role_of``): what a running instance or a definition's ``extra_args`` reads."""
    found: list[tuple[str, FileRole]] = []
    items = list(args)
    i = 0
    while i < len(items):
        flag, inline = items[i], None
        if flag.startswith("--") and "=" in flag:
            flag, inline = flag.split("=", 1)
        if flag in PATH_FLAGS or flag in MODEL_FLAGS:
            value = inline
            if value is None and i + 1 < len(items):
                i += 1
                value = items[i]
            for path in _paths_in(flag, value or ""):
                if path:
                    found.append((path, role_of(flag)))
        i += 1
    return found


def _paths_in(flag: str, value: str) -> list[str]:
    if flag in _SCALED:  # FILE:SCALE,...
        return [item.rsplit(":", 1)[0] if re.search(r":[-+.\d]+$", item) else item for item in value.split(",")]
    return value.split(",") if flag in _LISTS else [value]
