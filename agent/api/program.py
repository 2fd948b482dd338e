"""How to run this program again with a subcommand: the frozen executable, or this Python.

A frozen build (PyInstaller) is one executable whose first argument picks the subcommand; from a
source checkout or a wheel it is ``python -m mirbadllm``. The daemon starts its local agent, the
app its daemon and the login item the app through this one function.
"""

from __future__ import annotations

import logging
import sys

_LOGGER = logging.getLogger(__name__)


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def program_argv(*args: str, frozen: bool | None = None, executable: str | None = None) -> list[str]:
    """``[exe, *args]`` when frozen, else ``[python, "-m", "mirbadllm", *args]``."""
    exe = executable or sys.executable
    if is_frozen() if frozen is None else frozen:
        return [exe, *args]
    return [exe, "-m", "mirbadllm", *args]
