"""Atomic file writes for the daemon's other files (config, token, health books, jobs).

The implementation is ``core.json_store``, shared with the agent: a temp file in the same
directory, mode set on its path (skipped on Windows), fsync, then ``os.replace``.
"""

from __future__ import annotations

from core.json_store import apply_mode, write_atomic, write_json_atomic

__all__ = ["apply_mode", "write_atomic", "write_json_atomic"]
