"""The arrows of the design brief: who may import whom. A violation names the file and the line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUI = ("PySide6", "qasync", "pyqtgraph", "shiboken6")
OURS = ("core", "agent", "daemon", "app", "mirbadllm", "installers", "tests", "bench")


Probes = dict[Path, str] | None  # modules that are not on disk, each a path under the package and its source


def _sources(package: str, probes: Probes = None) -> dict[Path, str]:
    """The package's modules and their text, plus ``probes``: the checks below are shown to see a
    violation with probes in memory, never files written into the tree (which another test reading
    the tree at the same moment would trip over)."""
    found = {path: path.read_text(encoding="utf-8") for path in (ROOT / package).rglob("*.py")}
    return {**found, **(probes or {})}


def _imports(package: str, probes: Probes = None) -> list[tuple[Path, int, str]]:
    found = []
    for path, text in _sources(package, probes).items():
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module))
    return found


def _violations(package: str, allowed: callable, probes: Probes = None) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{line} imports {name}" for p, line, name in _imports(package, probes)
            if not allowed(name)]


def _top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("package", ["agent", "daemon"])
def test_no_gui_in_servers(package: str) -> None:
    assert _violations(package, lambda n: _top(n) not in GUI) == []


def test_agent_imports_nothing_of_ours_outside_agent() -> None:
    assert _violations("agent", lambda n: _top(n) not in ("daemon", "app", "mirbadllm")) == []


def test_core_imports_nothing_of_ours() -> None:
    """``core`` is the bottom layer every program shares (files, hashing, HTTP, the relay, keys,
    signed releases): it never reaches up into a program."""
    assert _violations("core", lambda n: _top(n) == "core" or _top(n) not in OURS) == []


@pytest.mark.parametrize("package", ["agent/api", "daemon/api"])
def test_api_packages_hold_contracts_and_clients_only(package: str) -> None:
    """``agent/api`` and ``daemon/api`` are wire contracts and their typed clients: they import each
    other's contracts and the core layer, nothing of a server's insides and nothing of the app."""
    def allowed(name: str) -> bool:
        top = _top(name)
        return (top not in OURS or top == "core" or name in ("agent.api", "daemon.api")
                or name.startswith(("agent.api.", "daemon.api.")))

    assert _violations(package, allowed) == []


def test_daemon_imports_only_the_agent_contracts() -> None:
    def allowed(name: str) -> bool:
        return _top(name) not in ("agent", "app") or name == "agent.api" or name.startswith("agent.api.")

    assert _violations("daemon", allowed) == []


def test_app_sees_only_the_daemon_api() -> None:
    """The app talks to the daemon through ``daemon.api`` alone: the agent's contracts it shows
    come re-exported from there, and the launcher is not imported for its version. The core layer
    (signed releases for its self-update) is shared by all."""
    def allowed(name: str) -> bool:
        top = _top(name)
        if top == "daemon":
            return name == "daemon.api" or name.startswith("daemon.api.")
        return top in ("app", "core") or top not in OURS

    assert _violations("app", allowed) == []


def test_daemon_does_not_import_the_launcher() -> None:
    assert _violations("daemon", lambda n: _top(n) != "mirbadllm") == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycles(package: str, probes: Probes = None) -> list[list[str]]:
    """Import cycles among ``package``'s modules (function-level imports count: they run too)."""
    sources = _sources(package, probes)
    modules = {_module_name(p): p for p in sources}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for path, _line, name in _imports(package, probes):
        graph[_module_name(path)] |= {n for n in (name,) if n in modules}
    for path in modules.values():  # ``from agent.api import models`` names a module too
        for node in ast.walk(ast.parse(sources[path])):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                graph[_module_name(path)] |= {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
    return _cycles_in({name: deps - {name} for name, deps in graph.items()})


@pytest.mark.parametrize("package", ["agent", "daemon", "core"])
def test_no_import_cycle(package: str) -> None:
    assert _cycles(package) == []


def _folder_cycles(package: str, probes: Probes = None) -> list[list[str]]:
    """Import cycles among ``package``'s feature folders (``daemon.models`` -> ``daemon.nodes`` -> ...),
    every import counted (function-level too); modules at the package's top are left out."""
    graph: dict[str, set[str]] = {}
    for path, _line, name in _imports(package, probes):
        parts = path.relative_to(ROOT / package).parts
        target = name.split(".")
        if len(parts) < 2 or target[0] != package or len(target) < 2:
            continue
        here, there = parts[0], target[1]
        graph.setdefault(here, set())
        if there != here and (ROOT / package / there).is_dir():
            graph[here].add(there)
    return _cycles_in(graph)


def _cycles_in(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle of ``graph`` found by a depth-first walk, as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return found


def test_no_cycle_between_daemon_feature_folders() -> None:
    """Models, nodes and the router (and every other folder) import each other one way only:
    ``daemon.deps`` wires what a lower folder needs from a higher one through a protocol."""
    assert _folder_cycles("daemon") == []


def test_the_folder_cycle_check_sees_one() -> None:
    probe = {ROOT / "daemon" / "nodes" / "_folder_probe.py": "def later():\n    from daemon.router import router\n"}
    assert any({"nodes", "router"} <= set(cycle) for cycle in _folder_cycles("daemon", probe))


def test_only_the_entry_point_imports_the_daemon_server() -> None:
    """The composition root (``daemon.deps``) hands each part what it uses: no part reaches back
    for the whole daemon through ``daemon.server``."""
    def allowed(name: str) -> bool:
        return name != "daemon.server"

    found = [v for v in _violations("daemon", allowed) if not v.startswith("daemon/main.py:")]
    assert found == []


def test_the_cycle_check_sees_a_cycle() -> None:
    probes = {ROOT / "agent" / "_cycle_probe_a.py": "import agent._cycle_probe_b\n",
              ROOT / "agent" / "_cycle_probe_b.py": "def later():\n    from agent import _cycle_probe_a\n"}
    assert _cycles("agent", probes) == [["agent._cycle_probe_a", "agent._cycle_probe_b", "agent._cycle_probe_a"]]


def test_the_check_sees_a_violation() -> None:
    """The checker itself must catch a forbidden import, or the tests above prove nothing: one at
    the top of a module and one inside a function, as the app imports Qt lazily."""
    probe = {ROOT / "agent" / "_boundary_probe.py":
             "import daemon.models.registry\n\n\ndef later():\n    from daemon.keys import KeyStore\n"}
    assert sorted(_violations("agent", lambda n: _top(n) != "daemon", probe)) == [
        "agent/_boundary_probe.py:1 imports daemon.models.registry",
        "agent/_boundary_probe.py:5 imports daemon.keys"]


# --- a runtime is a value: what it can do is asked of its profile (agent/api/runtimes.py) ---------
RUNTIME_IDS = {"llamacpp", "vllm", "mlx", "external", "rpc"}  # "rpc": an rpc-server's process record
RUNTIME_CONSTANTS = {"LLAMACPP", "EXTERNAL"}  # and every *_RUNTIME constant (DEFAULT_RUNTIME, RPC_RUNTIME)
REGISTRY = Path("agent/api/runtimes.py")


def _names_a_runtime(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    # settings_field == "vllm" is a runtime switch in disguise: the settings' type says it (settings_type)
    return name in ("runtime", "settings_field") or name.endswith("_runtime")


def _a_runtime_id(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in RUNTIME_IDS
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return name in RUNTIME_CONSTANTS or (name.isupper() and name.endswith("RUNTIME"))
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_a_runtime_id(e) for e in node.elts)
    return False


def runtime_switches(source: str) -> list[int]:
    """Lines that compare a runtime with a runtime's id (``runtime == "vllm"``, ``in ("mlx", ...)``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_runtime(s) for s in sides) and any(_a_runtime_id(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_no_runtime_switch_outside_the_registry() -> None:
    found = []
    for package in ("core", "agent", "daemon", "app", "mirbadllm", "installers"):
        for path in (ROOT / package).rglob("*.py"):
            if path.relative_to(ROOT) == REGISTRY:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in runtime_switches(path.read_text(encoding="utf-8"))]
    assert found == [], "ask the runtime's profile (agent.api.runtimes.profile) instead of comparing ids"


def test_the_runtime_switch_check_sees_one() -> None:
    assert runtime_switches('if definition.runtime == "vllm": pass') == [1]
    assert runtime_switches("x = spec.runtime in ('mlx', 'vllm')") == [1]
    assert runtime_switches("y = runtime != EXTERNAL") == [1]
    assert runtime_switches("z = profile(definition.runtime).takes_folder") == []
    assert runtime_switches("w = form.runtime != self.runtime") == []
    assert runtime_switches("u = b.runtime == DEFAULT_RUNTIME") == [1]
    assert runtime_switches("t = self.runtime == RPC_RUNTIME") == [1]
    assert runtime_switches("s = spec.runtime != runtimes.DEFAULT_RUNTIME") == [1]
    assert runtime_switches("r = profile(b.runtime).default") == []
    assert runtime_switches('v = profile(definition.runtime).settings_field == "vllm"') == [1]


# --- a runtime's settings are read through the accessor (``definition.runtime_settings``) ------------
SIDE_BY_SIDE = {"vllm", "mlx"}  # the definition's and launch spec's fields of one runtime's settings each
CONTRACTS = ("agent/api/", "daemon/api/")  # where those fields are declared (and the registry reads them)
# A run's records keep the vLLM settings it ran under the same name (daemon.api.jobs CandidateResult.vllm,
# BenchmarkResult.vllm, mirrored by daemon.jobs.runs.ReadBack): a result, not a model's own settings.
RESULT_RECORDS = {"cand", "ran"}


def settings_reads(source: str) -> list[int]:
    """Lines that read one runtime's settings by field name (``definition.vllm``, ``spec.mlx``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in SIDE_BY_SIDE and isinstance(node.ctx, ast.Load):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name not in RESULT_RECORDS:
                lines.append(node.lineno)
    return lines


def test_a_runtimes_settings_are_read_through_the_accessor() -> None:
    found = []
    for package in ("core", "agent", "daemon", "app", "mirbadllm", "installers", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(CONTRACTS):
                continue
            found += [f"{relative}:{line}" for line in settings_reads(path.read_text(encoding="utf-8"))]
    assert found == [], "read definition.runtime_settings (agent.api.runtimes.settings_of), not .vllm / .mlx"


def test_the_settings_read_check_sees_one() -> None:
    assert settings_reads("n = definition.vllm.max_num_seqs") == [1]
    assert settings_reads("check(spec.mlx, path)") == [1]
    assert settings_reads("x = self.definition.vllm") == [1]
    assert settings_reads("s = definition.runtime_settings") == []
    assert settings_reads("w = cand.vllm") == []  # a tuning candidate's record
    assert settings_reads("update = {'vllm': settings}") == []
