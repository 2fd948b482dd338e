"""Contracts of model updates from the Hugging Face hub (``daemon.sources.updates``).

A model pulled from the hub records its origin (``ModelSource``: repository, commit, each file's
SHA-256 and size). The daemon asks the hub daily (and on demand) whether those files changed and
says so per model (``ModelUpdate``); an update fetches the new revision's files beside the old ones
on the model's node, checks their SHA-256 against the hub's listing, points the model at them
(restarting it if it ran) and keeps the old files for a roll back:

    GET  /api/model-updates               -> list[ModelUpdate]  # the last check's answer per hub model
    POST /api/model-updates/check         -> list[ModelUpdate]  # ask the hub now
    POST /api/models/{id}/update          -> Transfer (202)     # 409 no_hub_origin | update_refused | no_update
    POST /api/models/{id}/rollback        -> ModelView          # 409 nothing_to_roll_back
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.api.sources import SourceFile

UpdateState = Literal["unchecked", "current", "available", "refused", "failed"]


class ModelUpdate(BaseModel):
    """What the hub says of one model's files now."""

    model: str = Field(description="The model's id.")
    hf_repo: str
    hf_file: str | None = None
    revision: str | None = Field(default=None, description="The commit the model's files are of.")
    latest: str | None = Field(default=None, description="The hub's newest commit of the repository.")
    state: UpdateState = Field(default="unchecked", description="available: a newer revision changes its files; "
                               "refused: the hub's answer cannot be trusted (a file changed without a new "
                               "revision) and nothing is done; failed: the hub could not be asked.")
    reason: str | None = Field(default=None, description="Why refused or failed, or what the update changes.")
    files: list[SourceFile] = Field(default_factory=list, description="The newest revision's files of the model.")
    checked_at: float | None = None
    previous_revision: str | None = Field(default=None, description="The revision a roll back returns to.")
    can_roll_back: bool = False


__all__ = ["ModelUpdate", "SourceFile", "UpdateState"]
