"""Contract of the daemon as the fleet's checked mirror: ``POST /api/mirror`` -> ``Transfer`` (202).

A node that needs a model file this machine has (its local agent's models folder: a download
finished here once, an import) gets it from the daemon over the agents' mutual TLS rather than
from the hub. Name the version by a registered model (``model_id``: its GGUF and its ``--mmproj``
projector) or by its files on the source node (``path``, ``projector_path``), and the node it goes
to. The source node is this machine (``local``): the daemon mirrors only what it can read itself,
and never outside the local agent's models folder.

The answer is a ``Transfer`` of kind ``mirror`` (``daemon.api.sources``) followed with the same
events as a download (``transfer.state``, ``transfer.progress``); when it is done the version's
files are in place on the node, each file's SHA-256 checked there, and (unless
``register_model`` is false) a model registered on the node (``registered``). Refusals: 404
``model_not_found`` / ``node_unknown``, 422 ``mirror_source_not_local`` / ``outside_models_folder``
/ ``mirror_same_node``, 409 ``download_in_progress`` while a download of a file still runs here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from daemon.api.models import LOCAL_NODE, MODEL_ID_PATTERN


class MirrorQuery(BaseModel):
    """What to mirror (a registered model, or files on the source node) and to which node."""

    model_config = ConfigDict(extra="forbid")

    model_id: str | None = Field(default=None, pattern=MODEL_ID_PATTERN,
                                 description="A registered model on this machine: its file and its --mmproj.")
    source_node: str = Field(default=LOCAL_NODE, max_length=200, description="Where the files are: 'local'.")
    path: str | None = Field(default=None, min_length=1, max_length=4096,
                             description="Instead of model_id: the GGUF, absolute or relative to the models folder.")
    projector_path: str | None = Field(default=None, min_length=1, max_length=4096,
                                       description="With path: its vision projector (mmproj).")
    target_node: str = Field(min_length=1, max_length=200, description="The node that gets the files.")
    register_model: bool = Field(default=True, description="Register the model on the target node when done.")
    register_id: str | None = Field(default=None, pattern=MODEL_ID_PATTERN,
                                    description="Id of the model registered there (default: made from the source's).")
    served_name: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _one_source(self) -> MirrorQuery:
        if (self.model_id is None) == (self.path is None):
            raise ValueError("name either model_id or path (with source_node), not both")
        if self.projector_path is not None and self.path is None:
            raise ValueError("projector_path goes with path; a model_id brings its own --mmproj")
        return self


__all__ = ["MirrorQuery"]
