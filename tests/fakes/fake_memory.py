"""A system-memory probe that reports what the test says: admission without depending on the host."""

from __future__ import annotations

import logging

_LOGGER = logging.getLogger(__name__)

GiB = 1 << 30


class FakeMemoryProbe:
    def __init__(self, total: int = 16 * GiB, available: int = 12 * GiB) -> None:
        self.total = total
        self.available = available

    def memory(self) -> tuple[int, int]:
        return self.total, self.available
