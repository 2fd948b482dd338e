"""Runtime port blocks for tests: away from 18080 (a real agent's, e.g. `make run` beside `make test`)
and from each other, so a runtime never finds its port taken by another test's."""

from __future__ import annotations

import itertools
import logging
import os
import random

from agent.runtimes.ports import port_is_free

_LOGGER = logging.getLogger(__name__)

# Each call gets the next block, from a random start, so tests of one run (and two runs at once)
# rarely meet. Parallel workers (pytest-xdist) each take every n-th block: theirs never overlap.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_WORKERS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
_ALL_BASES = list(range(20000, 32000, 50))[_WORKER % _WORKERS::_WORKERS]
_START = random.randrange(len(_ALL_BASES))
_BASES = itertools.cycle(_ALL_BASES[_START:] + _ALL_BASES[:_START])


def free_port_block(size: int = 20) -> int:
    """A first port whose next ``size`` ports are free now."""
    for _ in range(len(_ALL_BASES)):
        base = next(_BASES)
        if all(port_is_free(port) for port in range(base, base + size)):
            return base
    raise RuntimeError(f"no free block of {size} ports in 20000-32000")
