"""A server raises its soft open-files limit at start (macOS starts programs at 256)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows has no open-files limit")

PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from core.limits import raise_open_files_limit
now = raise_open_files_limit(4096)
print(now, resource.getrlimit(resource.RLIMIT_NOFILE)[0], raise_open_files_limit(100))
"""


def test_a_low_soft_limit_is_raised_and_never_lowered() -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit here is {hard}")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["4096", "4096", "4096"]  # raised; a smaller wish lowers nothing
