"""The docs stay true to the code: ``docs/reference.md`` is what its generator writes from the code
now (``make docs``), ``docs/architecture.md`` stays a map one reads in twenty minutes, and every
repository path it names exists."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 600
# What a path in the repository starts with; data-directory paths (`{home}/...`, `identity/`) do not.
REPO_TOPS = ("core/", "agent/", "daemon/", "app/", "mirbadllm/", "installers/", "tests/", "bench/", "docs/",
             "resources/", ".github/")
REPO_FILES = ("Makefile", "README.md", "pyproject.toml")


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference(generator: ModuleType) -> str:
    return generator.render()


def test_the_reference_is_what_the_code_says_now(reference: str) -> None:
    on_disk = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert on_disk == reference, "docs/reference.md is out of date: run `make docs` and commit it"


def test_the_reference_has_every_route_and_the_codes_clients_meet(reference: str) -> None:
    for row in ("| GET | `/v1/models` |", "| any | `/v1/{path}` |", "| POST | `/api/models/{id}/start` |",
                "| POST | `/agent/v1/instances` |", "| any | `/agent/v1/proxy/{id}/{path}` |",
                "| POST | `/agent/v1/pairing/complete` |"):
        assert row in reference
    for row in ("| `model_not_found` | 404 |", "| `queue_full` | 503 |", "| `invalid_api_key` | 401 |",
                "| `spec_rejected` | 422 |", "| `insufficient_memory` | 409 |", "| `peer_not_allowed` | 403 |"):
        assert row in reference


def test_the_architecture_is_a_map_not_a_dump() -> None:
    lines = len(ARCHITECTURE.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"docs/architecture.md has {lines} lines; keep it under {MAX_LINES}"


def test_the_architecture_links_the_reference() -> None:
    assert "(reference.md)" in ARCHITECTURE.read_text(encoding="utf-8")


def repository_paths(text: str) -> list[str]:
    """Every backticked path in ``text`` that names a file or folder of this repository."""
    found = []
    for token in re.findall(r"`([^`\s]+)`", text):
        path = token.split("::")[0]
        if re.search(r"[{}<>*?$]", path):
            continue  # a pattern or a placeholder, not one file
        if path.startswith(REPO_TOPS) or path in REPO_FILES:
            found.append(path)
    return found


def test_every_path_the_architecture_names_exists() -> None:
    missing = sorted({p for p in repository_paths(ARCHITECTURE.read_text(encoding="utf-8"))
                      if not (ROOT / p).exists()})
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_path_check_sees_paths() -> None:
    text = "The table is `daemon/routes.py`; `agent/` holds `agent/nope.py`, not `{home}/agent/` or `models.json`."
    assert repository_paths(text) == ["daemon/routes.py", "agent/", "agent/nope.py"]
    assert not (ROOT / "agent" / "nope.py").exists()
