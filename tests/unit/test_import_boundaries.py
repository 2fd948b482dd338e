"""The arrows of the design brief: who may import whom. A violation names the file and the line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUI = ("PySide6", "qasync", "pyqtgraph", "shiboken6")


def _imports(package: str) -> list[tuple[Path, int, str]]:
    found = []
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module))
    return found


def _violations(package: str, allowed: callable) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{line} imports {name}" for p, line, name in _imports(package)
            if not allowed(name)]


def _top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("package", ["agent", "daemon"])
def test_no_gui_in_servers(package: str) -> None:
    assert _violations(package, lambda n: _top(n) not in GUI) == []


def test_agent_imports_nothing_of_ours_outside_agent() -> None:
    assert _violations("agent", lambda n: _top(n) not in ("daemon", "app", "mirbadllm")) == []


def test_daemon_imports_only_the_agent_contracts() -> None:
    def allowed(name: str) -> bool:
        return _top(name) not in ("agent", "app") or name == "agent.api" or name.startswith("agent.api.")

    assert _violations("daemon", allowed) == []


OURS = ("agent", "daemon", "app", "mirbadllm", "installers", "tests", "bench")


def test_app_sees_only_the_daemon_api() -> None:
    """The app talks to the daemon through ``daemon.api`` alone: the agent's contracts it shows
    come re-exported from there, and the launcher is not imported for its version."""
    def allowed(name: str) -> bool:
        top = _top(name)
        if top == "daemon":
            return name == "daemon.api" or name.startswith("daemon.api.")
        return top == "app" or top not in OURS

    assert _violations("app", allowed) == []


def test_daemon_does_not_import_the_launcher() -> None:
    assert _violations("daemon", lambda n: _top(n) != "mirbadllm") == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """The checker itself must catch a forbidden import, or the tests above prove nothing: one at
    the top of a module and one inside a function, as the app imports Qt lazily."""
    bad = ROOT / "agent" / "_boundary_probe.py"
    bad.write_text("import daemon.registry\n\n\ndef later():\n    from daemon.keys import KeyStore\n")
    try:
        assert sorted(_violations("agent", lambda n: _top(n) != "daemon")) == [
            "agent/_boundary_probe.py:1 imports daemon.registry",
            "agent/_boundary_probe.py:5 imports daemon.keys"]
    finally:
        bad.unlink()
