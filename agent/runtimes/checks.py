"""Has this runtime build been seen to generate on this machine? Checked once per build, by hash.

A llama.cpp build made for another CPU (``-march=native`` on a machine with AMX, say) loads and
then dies with SIGILL in its first matrix kernel. The agent therefore fingerprints every runtime
it starts (SHA-256 over the executable and the shared libraries beside it, where ggml's CPU
variants live) and keeps a verdict per fingerprint in ``runtime-checks.json``:

- the first time a build is ready, one one-token generation is asked of it; an answer records
  ``ok``;
- a run of that build that stops on SIGILL records ``illegal_instruction``, and its error is
  ``ILLEGAL_INSTRUCTION`` (exactly, on the instance, the model's status and ``ctl status``);
- a start of a build already recorded as ``illegal_instruction`` is refused at once with the same
  message, until the build changes (a rebuild has another fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.runtimes.driver import RuntimeUnusable
from core.hashing import file_sha256
from core.json_store import write_json_atomic

_LOGGER = logging.getLogger(__name__)

ILLEGAL_INSTRUCTION = ("llama-server stopped on an illegal instruction: this build uses CPU features "
                       "this machine cannot run; rebuild it with `make runtime`")
SIGILL_CODE = -int(signal.SIGILL)
# Windows reports the same fault as the process's exit code: STATUS_ILLEGAL_INSTRUCTION.
STATUS_ILLEGAL_INSTRUCTION = 0xC000001D
LIBRARY_PREFIXES = ("libggml", "libllama", "libmtmd", "ggml", "llama")
# ``failed``: a GPU backend of the build that did not compute here (``agent.runtimes.backends``).
Verdict = Literal["ok", "illegal_instruction", "failed"]


@dataclass(frozen=True)
class CheckRecord:
    fingerprint: str
    verdict: Verdict
    executable: str
    checked_at: float
    detail: str = ""


def is_illegal_instruction(exit_code: int | None) -> bool:
    """SIGILL on POSIX; STATUS_ILLEGAL_INSTRUCTION on Windows (unsigned or as a signed 32-bit code)."""
    if exit_code is None:
        return False
    return exit_code == SIGILL_CODE or exit_code & 0xFFFFFFFF == STATUS_ILLEGAL_INSTRUCTION


class RuntimeChecks:
    """The verdicts per build fingerprint, in one JSON file (atomic writes)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._records = self._load()

    def _load(self) -> dict[str, CheckRecord]:
        try:
            raw = json.loads(self._path.read_text())
            return {k: CheckRecord(**v) for k, v in dict(raw.get("checks", {})).items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            _LOGGER.warning("ignoring unreadable %s: %s", self._path, exc)
            return {}

    def _save(self) -> None:
        write_json_atomic(self._path, {"checks": {k: vars(v) for k, v in self._records.items()}}, mode=0o600)

    def _file_hash(self, path: Path) -> str:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in self._hashes:
            self._hashes[key] = file_sha256(path)
        return self._hashes[key]

    def fingerprint(self, executable: Path, library_dir: Path | None) -> str:
        """SHA-256 over the executable and the runtime libraries beside it (names and contents)."""
        files = [executable.resolve()]
        if library_dir is not None and library_dir.is_dir():
            files += sorted(p.resolve() for p in library_dir.iterdir()
                            if p.name.startswith(LIBRARY_PREFIXES) and p.is_file() and p.resolve() != files[0])
        digest = hashlib.sha256()
        for path in dict.fromkeys(files):
            digest.update(f"{path.name}\0{self._file_hash(path)}\0".encode())
        return digest.hexdigest()

    def verdict(self, fingerprint: str) -> CheckRecord | None:
        return self._records.get(fingerprint)

    def record(self, fingerprint: str, verdict: Verdict, executable: str, detail: str = "") -> None:
        current = self._records.get(fingerprint)
        if current is not None and current.verdict == verdict:
            return
        self._records[fingerprint] = CheckRecord(fingerprint=fingerprint, verdict=verdict, executable=executable,
                                                 checked_at=time.time(), detail=detail)
        _LOGGER.log(logging.INFO if verdict == "ok" else logging.ERROR,
                    "runtime %s (%s): %s %s", executable, fingerprint[:12], verdict, detail)
        try:
            self._save()
        except OSError as exc:
            _LOGGER.warning("cannot write %s: %s", self._path, exc)

    def refuse_if_known_bad(self, fingerprint: str) -> None:
        record = self._records.get(fingerprint)
        if record is not None and record.verdict == "illegal_instruction":
            raise RuntimeUnusable(ILLEGAL_INSTRUCTION)
