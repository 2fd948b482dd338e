"""What the tests do when a part of the built runtime is missing: under `make test` (which sets
``MIRBADLLM_REQUIRE_RUNTIME``) it is a failure, since the build makes every part; elsewhere a skip."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_RUNTIME_ENV = "MIRBADLLM_REQUIRE_RUNTIME"


def no_runtime(message: str) -> NoReturn:
    if os.environ.get(REQUIRE_RUNTIME_ENV):
        pytest.fail(message)
    pytest.skip(message)
