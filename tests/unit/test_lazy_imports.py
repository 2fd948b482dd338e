"""Starting the agent, the daemon or the CLI does not import the heavy libraries that only some paths
need: gguf (and numpy, yaml) when a GGUF header is read, huggingface_hub when the hub is asked,
opentelemetry when tracing is on, zeroconf when mDNS runs, docker for vLLM. Each of these costs
tens to hundreds of milliseconds at every start (and every daemon the tests start also starts an agent).
Checked by what lands in ``sys.modules``, in a fresh interpreter, never by timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("gguf", "numpy", "yaml", "huggingface_hub", "opentelemetry", "zeroconf", "docker", "PySide6")
PROBE = "import importlib, sys; importlib.import_module(sys.argv[1]); " \
        "print(' '.join(sorted(m for m in sys.argv[2:] if m in sys.modules)))"


@pytest.mark.parametrize("entry", ["agent.main", "daemon.main", "mirbadllm.ctl", "mirbadllm.chat"])
def test_starting_imports_no_heavy_library(entry: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, entry, *HEAVY], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == [], f"import {entry} pulled in {out.stdout.strip()}: import them where used"


def test_the_gguf_table_is_loaded_when_a_tensor_is_read() -> None:
    """The lazy side still works: a header with a tensor is sized from gguf's own table."""
    probe = ("import struct, sys; from agent.gguf_reader import parse_header; "
             "assert 'gguf' not in sys.modules; "
             "name = b't'; "
             "buf = b'GGUF' + struct.pack('<IQQ', 3, 1, 0) + struct.pack('<Q', len(name)) + name "
             "+ struct.pack('<I', 1) + struct.pack('<Q', 32) + struct.pack('<I', 0) + struct.pack('<Q', 0); "
             "buf += b'\\0' * (-len(buf) % 32) + b'\\0' * 128; "
             "h = parse_header(buf, len(buf)); "
             "print(h.tensors[0].n_bytes, 'gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["128", "True"]  # 32 F32 elements, 4 bytes each
