"""Contracts of the daemon's model-source API: will it fit, downloads, imports and their transfers.

The node's agent does the work (``agent.api.sources``); these add which node, and what to
register once a transfer is done (with ``settings`` and ``rpc_nodes``: how the first model runs, the
plan option the wizard picked before the download). Pause, resume, retry and the history of finished
ones: ``daemon.sources.downloads``. Progress reaches the app as events: ``transfer.state`` and
``transfer.progress`` (data: a ``Transfer``), then ``model.added`` for each registered model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import (
    DownloadRequest,
    FitRequest,
    FolderImportRequest,
    ImportedModel,
    LmStudioImportRequest,
    LmStudioModelInfo,
    OllamaImportRequest,
    TransferInfo,
)
from daemon.api.models import LOCAL_NODE, MODEL_ID_PATTERN


class FitQuery(FitRequest):
    """``FitRequest`` on a node."""

    node: str = Field(default=LOCAL_NODE, max_length=200)


class Registration(BaseModel):
    """What to register once files are in place; by default every model found, named after it."""

    register_models: bool = Field(default=True, description="Add the models found to the registry.")
    model_id: str | None = Field(default=None, pattern=MODEL_ID_PATTERN, description="Id of the one model.")
    served_name: str | None = Field(default=None, min_length=1, max_length=128)
    tags: list[str] = Field(default_factory=list)
    preset: Literal["demo"] | None = Field(
        default=None, description="Register the first model with a known definition: the demo model's "
                                  "settings (daemon.api.demo_model).")
    settings: LlamaCppSettings | None = Field(
        default=None, description="llama.cpp settings of the first model (the add-model wizard's plan option "
                                  "picked: its GPUs, layers, split and context); None: the defaults.")
    rpc_nodes: list[str] = Field(default_factory=list, max_length=8,
                                 description="The first model's helper nodes (a plan option across nodes).")


class DownloadQuery(DownloadRequest, Registration):
    node: str = Field(default=LOCAL_NODE, max_length=200)


class OllamaImportQuery(OllamaImportRequest, Registration):
    node: str = Field(default=LOCAL_NODE, max_length=200)


class FolderImportQuery(FolderImportRequest, Registration):
    node: str = Field(default=LOCAL_NODE, max_length=200)


class LmStudioImportQuery(LmStudioImportRequest, Registration):
    """Register LM Studio's files where they lie; a file a model on the node already runs is named in
    ``Transfer.existing``, not registered again."""

    node: str = Field(default=LOCAL_NODE, max_length=200)
    tags: list[str] = Field(default_factory=lambda: ["lmstudio"])


class LmStudioModel(LmStudioModelInfo):
    """A GGUF in LM Studio's folders on a node, with what the daemon knows of it."""

    quant: str | None = Field(default=None, description="The quant its file name says (Q4_K_M); None: none.")
    registered_as: str | None = Field(default=None, description="The id of the model on that node that "
                                      "already runs this file; None: not added yet.")


class Transfer(TransferInfo):
    """A transfer as the daemon tracks it: the agent's view, its node, the models it registered."""

    node: str = LOCAL_NODE
    agent_id: str = ""
    registered: list[str] = Field(default_factory=list, description="Ids of the models registered.")
    register_error: str | None = None
    existing: list[str] = Field(default_factory=list, description=(
        "Ids of models already registered with a file this transfer found on the same node: "
        "nothing is added for those."))
    speed_bps: float | None = Field(default=None, description="Bytes per second while it runs, smoothed "
                                    "(None: not running, or no progress yet).")
    eta_s: float | None = Field(default=None, description="Seconds left at that speed (None: not known).")


__all__ = ["DownloadQuery", "FitQuery", "FolderImportQuery", "ImportedModel", "LmStudioImportQuery",
           "LmStudioModel", "OllamaImportQuery", "Registration", "Transfer"]
