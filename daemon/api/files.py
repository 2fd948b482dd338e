"""My models and disk: each node's model files with the models that use them, and removing them.

    GET    /api/nodes/{id}/files     -> NodeFilesView  # the models folder's files, each with its models; the disk
    DELETE /api/nodes/{id}/files     -> FileRemoved    # ?path=P; a file no model uses (409 file_in_use)
    DELETE /api/models/{id}          -> ModelRemoval   # ?files=1: the model, then its files no other model uses

Only files in the node's models folder (downloads, mirrors, Ollama imports, the demo model) are
ever removed; a model registered where it lies (LM Studio's folder, the user's own) keeps its files
(``kept``, ``outside_models_folder``), and so does a file another model still uses (``used``).
``unused_files`` and ``files_to_free`` are what the app and ``ctl models rm --files`` show before
they ask.

Which model reads which file is decided here, by pure functions the daemon and the app's demo
daemon share: a model reads its ``model_path`` (a GGUF, or every file in a vLLM or MLX model
folder), its LoRA adapters' files and every file its ``extra_args`` name (``--mmproj``,
``--model-draft``...: ``agent.api.files.files_in_args``). A model placed ``auto`` may run on any
node, so its files are in use on each. Paths are compared by text (``core.safe_names``): the files
are on another machine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from agent.api.files import FileRemoved, FileRole, NodeFile, NodeFiles, files_in_args
from agent.api.runtimes import profile
from core.safe_names import lexically_inside, lexically_same
from daemon.api.models import AUTO_NODE, ModelDefinition

__all__ = ["FileRemoved", "FileRole", "FileUse", "KeptFile", "ModelRemoval", "NodeFileView", "NodeFiles",
           "NodeFilesView", "files_of", "files_to_free", "removal_plan", "unused_files", "uses_of"]

KeptReason = Literal["used", "outside_models_folder", "missing", "refused"]


class FileUse(BaseModel):
    """A model that reads a file, and what the file is to it."""

    model: str = Field(description="The model's id.")
    role: FileRole = Field(description="model (its model_path, or inside its model folder), adapter (a LoRA), "
                           "projector (--mmproj), draft (--model-draft) or file (any other file flag).")


class NodeFileView(NodeFile):
    """A file in a node's models folder, with the models that use it."""

    used_by: list[FileUse] = Field(default_factory=list)
    unused: bool = Field(default=True, description="No model uses it: removing it loses nothing registered.")

    @property
    def frees(self) -> int:
        """Bytes its removal gives back (none while another hard link holds them)."""
        return self.size if self.links <= 1 else 0


class NodeFilesView(BaseModel):
    """A node's models folder: its files, largest first, and the disk it is on."""

    node: str = Field(description="The node's id ('local' for this machine).")
    node_name: str
    models_dir: str
    files: list[NodeFileView] = Field(default_factory=list)
    disk_total: int
    disk_free: int

    @property
    def unused_bytes(self) -> int:
        return sum(f.frees for f in unused_files(self))


class KeptFile(BaseModel):
    """A file of a removed model that was not deleted, and why."""

    path: str
    reason: KeptReason = Field(description="used: another model uses it; outside_models_folder: not ours to delete; "
                               "missing: not on the node; refused: the node would not (the message says why).")
    message: str
    used_by: list[str] = Field(default_factory=list, description="With 'used': the models that still use it.")


class ModelRemoval(BaseModel):
    """A model removed with its files: what was deleted, the bytes freed, and what was kept and why."""

    model: str
    node: str
    node_name: str
    deleted: list[FileRemoved] = Field(default_factory=list)
    kept: list[KeptFile] = Field(default_factory=list)
    freed: int = Field(default=0, description="Bytes given back to the node's disk.")


def unused_files(view: NodeFilesView) -> list[NodeFileView]:
    """The files no model uses: what "Remove unused files" removes."""
    return [f for f in view.files if f.unused]


def files_to_free(view: NodeFilesView, model: str) -> list[NodeFileView]:
    """The files removing ``model`` with its files deletes: those only it uses (in the models folder)."""
    return [f for f in view.files if f.used_by and {u.model for u in f.used_by} == {model}]


def files_of(definition: ModelDefinition) -> list[tuple[str, FileRole]]:
    """Every path the model reads, with what it is to the model (an external model reads none)."""
    if not profile(definition.runtime).on_node:  # an external endpoint
        return []
    found: list[tuple[str, FileRole]] = [(definition.model_path, "model")]
    found += [(adapter.file, "adapter") for adapter in definition.adapters]
    if profile(definition.runtime).reads_gguf:  # llama.cpp's flags; the others' files are in their folder
        found += files_in_args(definition.extra_args)
    return found


def reads(path: str, used: str, role: FileRole) -> bool:
    """Whether a model that reads ``used`` (as ``role``) reads the file ``path``: the same file, or one
    inside its model folder."""
    return lexically_same(path, used) or (role == "model" and lexically_inside(used, path))


def uses_of(path: str, node: str, definitions: Iterable[ModelDefinition]) -> list[FileUse]:
    """The models on ``node`` (or ``auto``) that read ``path``, each once, with its role."""
    found: dict[str, FileUse] = {}
    for definition in definitions:
        if definition.id in found or definition.node not in (node, AUTO_NODE):
            continue
        for used, role in files_of(definition):
            if reads(path, used, role):
                found[definition.id] = FileUse(model=definition.id, role=role)
                break
    return sorted(found.values(), key=lambda u: u.model)


def file_views(node: str, listing: NodeFiles, definitions: Iterable[ModelDefinition]) -> list[NodeFileView]:
    """The listed files, each with the models on ``node`` that use it."""
    every = list(definitions)
    views = []
    for item in listing.files:
        used_by = uses_of(item.path, node, every)
        views.append(NodeFileView(**item.model_dump(), used_by=used_by, unused=not used_by))
    return views


def removal_plan(definition: ModelDefinition, node: str, listing: NodeFiles,
                 others: Iterable[ModelDefinition]) -> tuple[list[str], list[KeptFile]]:
    """Which files of ``definition`` to delete from ``node`` once it is removed, and which to keep and
    why: one another model (of ``others``) uses, one outside the models folder, one not there."""
    every = list(others)
    delete: list[str] = []
    kept: list[KeptFile] = []
    for path in _candidates(definition, listing):
        used_by = uses_of(path, node, every)
        if used_by:
            kept.append(KeptFile(path=path, reason="used", used_by=[u.model for u in used_by],
                                 message=f"used by {', '.join(u.model for u in used_by)}"))
        elif not lexically_inside(listing.models_dir, path):
            kept.append(KeptFile(path=path, reason="outside_models_folder",
                                 message=f"outside the node's models folder ({listing.models_dir}): not ours to delete"))
        elif not any(lexically_same(f.path, path) for f in listing.files):
            kept.append(KeptFile(path=path, reason="missing", message="not on the node"))
        else:
            delete.append(path)
    return delete, kept


def _candidates(definition: ModelDefinition, listing: NodeFiles) -> list[str]:
    """Each file the model reads, once: its own paths, and the listed files in its model folder."""
    found: list[str] = []
    for used, role in files_of(definition):
        inside = [f.path for f in listing.files if reads(f.path, used, role) and not lexically_same(f.path, used)]
        for path in inside or [used]:
            if not any(lexically_same(path, seen) for seen in found):
                found.append(path)
    return found
