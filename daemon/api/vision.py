"""Which models can see images: a llama.cpp model does when its GGUF comes with a vision projector
(``--mmproj FILE`` or ``-mm FILE`` in its extra arguments, as registration and the hub's downloads
set it); without one llama-server cannot take an image at all.

Other runtimes (vLLM, MLX, an external endpoint) load a whole model whose config says whether it
sees; nothing here can tell, so an image goes to them and the runtime answers. The Playground and
``mirbadllm run`` refuse an image before sending only where the answer is known to be no.
"""

from __future__ import annotations

import logging

from daemon.api.contracts import profile
from daemon.api.models import ModelDefinition

_LOGGER = logging.getLogger(__name__)

PROJECTOR_FLAGS = ("--mmproj", "-mm")
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
               ".gif": "image/gif", ".bmp": "image/bmp"}
MAX_IMAGE_BYTES = 20 << 20  # one attachment; a photo fits, a raw scan does not


def projector_of(definition: ModelDefinition) -> str | None:
    """The model's vision projector file, if its arguments name one."""
    args = definition.extra_args
    for i, arg in enumerate(args):
        if arg in PROJECTOR_FLAGS and i + 1 < len(args):
            return args[i + 1]
        for flag in PROJECTOR_FLAGS:
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def sees_images(definition: ModelDefinition) -> bool | None:
    """True: it has a projector; False: a GGUF model without one; None: another runtime (cannot tell)."""
    if projector_of(definition):
        return True
    return False if profile(definition.runtime).reads_gguf else None


def cannot_see_reason(definition: ModelDefinition) -> str | None:
    """Why an image cannot go to this model, or None when it may."""
    if sees_images(definition) is not False:
        return None
    return (f"{definition.served_name} cannot see images: its GGUF has no vision projector (mmproj). "
            "Pick a vision model (one registered with its mmproj file) or remove the image.")
