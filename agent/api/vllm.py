"""Typed vLLM settings, and the pure functions between them and ``vllm serve``'s argv.

(Skeleton: the builder, the normalizer and the parser are being written; see issue 12.)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VllmSettings(BaseModel):
    """``vllm serve`` settings MirbadLLM owns; ``None`` means "leave vLLM's own default"."""

    model_config = ConfigDict(extra="forbid")

    max_model_len: int | None = Field(default=None, ge=1, description="Context length.",
                                      json_schema_extra={"flag": "--max-model-len", "runtime_default": "from model",
                                                         "unit": "tokens"})
    max_num_seqs: int | None = Field(default=None, ge=1, description="Sequences scheduled at once.",
                                     json_schema_extra={"flag": "--max-num-seqs", "runtime_default": 256,
                                                        "unit": "sequences"})
