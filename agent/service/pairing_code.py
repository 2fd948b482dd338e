"""The pairing code of an agent that has no console (a service), and reading it back.

An unpaired agent shows its code on its console. Run as a service it has none, so it also keeps
the current code in ``pairing-code.json`` in its home, readable by its own user and root only
(the people who could read its journal anyway), replaced on every rotation and removed once it is
paired or stops. ``mirbadllm agent pairing-code`` prints it.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from core.json_store import write_json_atomic


@dataclass(frozen=True)
class ShownCode:
    code: str
    fingerprint: str
    name: str
    where: str
    expires_at: float


def write_code(path: Path, shown: ShownCode) -> None:
    write_json_atomic(path, vars(shown), mode=0o600)


def forget_code(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def read_code(path: Path, now: float | None = None) -> ShownCode | None:
    """The code the agent shows now, or None (none written, unreadable, or expired)."""
    try:
        shown = ShownCode(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return shown if shown.expires_at > (time.time() if now is None else now) else None


def describe(shown: ShownCode, now: float | None = None) -> str:
    minutes = max(1, round((shown.expires_at - (time.time() if now is None else now)) / 60))
    return "\n".join([
        f'MirbadLLM agent "{shown.name}" is waiting to be paired ({shown.where}).',
        f"  Pairing code:  {shown.code}   (valid {minutes} more minutes, one use)",
        f"  Fingerprint:   {shown.fingerprint}   (the app must show the same)",
        f"  Pair it in the app (Nodes → Pair a node) or: mirbadllm ctl nodes pair {shown.where} {shown.code}",
    ])
