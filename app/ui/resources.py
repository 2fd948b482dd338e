"""Where the app's icons and themes live: ``resources/`` at the repository (or install) root."""

from __future__ import annotations

import logging
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


def resource(*parts: str) -> Path:
    path = RESOURCES.joinpath(*parts)
    if not path.exists():
        _LOGGER.warning("missing resource %s", path)
    return path
