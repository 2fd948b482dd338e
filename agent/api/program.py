"""How to run this program again with a subcommand: the frozen executable, or this Python.

A frozen build (PyInstaller) is one executable whose first argument picks the subcommand; from a
source checkout or a wheel it is ``python -m mirbadllm``. The daemon starts its local agent, the
app its daemon and the login item the app through this one function. ``program_version`` is
the installed distribution's version (a frozen build carries its metadata), so no package needs
to import the launcher for it.
"""

from __future__ import annotations

import importlib.metadata
import sys

UNKNOWN_VERSION = "0.0.0+unknown"


def program_version() -> str:
    """The ``mirbadllm`` distribution's version; ``UNKNOWN_VERSION`` when it is not installed."""
    try:
        return importlib.metadata.version("mirbadllm")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def program_argv(*args: str, frozen: bool | None = None, executable: str | None = None) -> list[str]:
    """``[exe, *args]`` when frozen, else ``[python, "-m", "mirbadllm", *args]``."""
    exe = executable or sys.executable
    if is_frozen() if frozen is None else frozen:
        return [exe, *args]
    return [exe, "-m", "mirbadllm", *args]
