"""Fixtures of the update tests: a release key made for the test, and the feed server on loopback."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.updates.release import ReleaseKey, ReleaseServer

_LOGGER = logging.getLogger(__name__)


@pytest.fixture
def key(tmp_path: Path) -> ReleaseKey:
    return ReleaseKey.make(tmp_path)


@pytest.fixture
async def release_server() -> AsyncIterator[ReleaseServer]:
    server = ReleaseServer()
    await server.start()
    yield server
    await server.close()
