"""Typed ``mlx_lm.server`` settings, and the pure functions between them and its argv.

(Skeleton: the builder and the parser are being written; see issue 12.)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MlxSettings(BaseModel):
    """``mlx_lm.server`` settings; ``None`` means "leave mlx-lm's own default"."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1, description="Default completion length.",
                                   json_schema_extra={"flag": "--max-tokens", "runtime_default": 512,
                                                      "unit": "tokens"})
