"""Write ``docs/reference.md``: every route and every error code, read from the code itself.

Run ``make docs`` (or ``.venv/bin/python -m docs.gen_reference``); ``--check`` exits 1 when the
file on disk is not what this writes now. ``tests/unit/test_docs_reference.py`` runs the same
comparison, so the reference cannot drift from the code.

Routes come from the route tables as the servers build them: the daemon's ``route_table``
(``daemon/routes.py``) and its ``ollama_route_table`` called with their handler classes, and the agent's ``create_app`` and
``create_pairing_app`` called with a stand-in for their dependencies (nothing is started, no file
is read). Each row is the method, the path, the handler, its docstring's first paragraph and the
trailing comment of the route's line (query parameters, body).

Error codes are found by reading the servers' source (``daemon/``, ``agent/``, ``core/relay.py``)
with ``ast``: a *sink* is a callable that puts a code on the wire, found by its parameters named
``status`` and ``code`` (``DaemonProblem``, ``error_response``, the agent's ``_error``, ...) and
every subclass of one (``AgentProblem``'s subclasses carry ``status`` and ``code`` as class
attributes), or a function that hands its own ``code`` parameter to a sink with a fixed status
(``validated``, the peer gate's ``refusal``). Each call of a sink whose code is a string, a
module constant or an ``if``/``else`` of those is a row; so is an error dict
(``{"code": ..., "message": ...}``) and a ``(status, "code", message)`` tuple. The typed clients
(``daemon/api/client.py``, ``agent/api/client.py``, ``agent/api/pairing.py``'s client) make
errors of their own and are not servers: their error classes are no sinks.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import io
import logging
import re
import sys
import tokenize
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python docs/gen_reference.py``
    sys.path.insert(0, str(ROOT))

_LOGGER = logging.getLogger(__name__)

REFERENCE = ROOT / "docs" / "reference.md"
SERVER_SOURCES = ("daemon", "agent", "core/relay.py")
CLIENT_ERRORS = {("agent.api.client", "AgentError"), ("daemon.api.client", "DaemonError")}
ROUTE_CALLS = {"get", "post", "put", "patch", "delete", "head", "route", "view"}


# --- routes ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Callable[..., object]

    @property
    def handler_name(self) -> str:
        module = self.handler.__module__
        return f"{module}.{self.handler.__qualname__.replace('.<locals>.', '.')}"


def _canonical(path: str) -> str:
    """aiohttp's canonical form of a path: ``{name:.+}`` is ``{name}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


def daemon_routes() -> list[Route]:
    """``daemon.routes.route_table`` with each handler's class in place of the built handler."""
    from daemon import routes

    hints = typing.get_type_hints(routes.Handlers)
    handlers = routes.Handlers(**{f.name: hints[f.name] for f in dataclasses.fields(routes.Handlers)})
    return [Route(r.method, _canonical(r.path), r.handler) for r in routes.route_table(handlers)]


def ollama_routes() -> list[Route]:
    """``daemon.routes.ollama_route_table`` with the handler class in place of the built handlers."""
    from daemon import routes
    from daemon.ollama.api import OllamaApi

    return [Route(r.method, _canonical(r.path), r.handler) for r in routes.ollama_route_table(OllamaApi)]  # type: ignore[arg-type]


def _app_routes(app: typing.Any) -> list[Route]:
    return [Route(r.method, r.resource.canonical, r.handler) for r in app.router.routes()
            if r.method != "HEAD"]  # aiohttp adds a HEAD beside every GET


def agent_routes() -> list[Route]:
    """The mutual-TLS app of a paired agent, built around a stand-in that has no rpc-servers."""
    from agent.paths import AgentPaths
    from agent.server import create_app

    stand_in = SimpleNamespace(paths=AgentPaths(ROOT / "docs" / ".no-agent-home"), rpc=None)
    return _app_routes(create_app(stand_in))  # type: ignore[arg-type]


def pairing_routes() -> list[Route]:
    """The app of an unpaired agent: the pairing routes only."""
    from agent.pairing.server import create_pairing_app

    return _app_routes(create_pairing_app(None, lambda _result: None))  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class RouteLine:
    """One ``web.get(path, handler)`` call in the source and the comment at the end of its line."""

    method: str
    handler: str
    path: re.Pattern[str] | None  # None: the path is a variable
    comment: str


def _comments(source: str) -> dict[int, str]:
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string.lstrip("#").strip()
    return found


def _path_pattern(node: ast.expr) -> re.Pattern[str] | None:
    """A route's path in the source as a regex over aiohttp's canonical path (``{name}``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        parts = [node.value]
    elif isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else None for v in node.values]  # type: ignore[misc]
    else:
        return None
    text = "".join(re.escape(_canonical(p)) if p is not None else ".*" for p in parts)
    return re.compile(text + "$")


@functools.cache
def route_lines(path: Path) -> tuple[RouteLine, ...]:
    return tuple(_route_lines(path))


def _route_lines(path: Path) -> Iterator[RouteLine]:
    source = path.read_text(encoding="utf-8")
    comments = _comments(source)
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "web"
                and node.func.attr in ROUTE_CALLS):
            continue
        args = node.args[1:] if node.func.attr == "route" else node.args
        method = (node.args[0].value if node.func.attr == "route" and isinstance(node.args[0], ast.Constant)
                  else node.func.attr).upper()
        if len(args) < 2:
            continue
        target = args[1]
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        comment = comments.get(node.end_lineno or node.lineno, "")
        yield RouteLine(method, name, _path_pattern(args[0]), comment)


def _route_comment(route: Route, sources: list[Path]) -> str:
    lines = [line for source in sources for line in route_lines(source)
             if line.method == route.method and line.handler == route.handler.__name__
             and (line.path is None or line.path.match(route.path))]
    comments = {line.comment for line in lines}
    return comments.pop() if len(comments) == 1 else ""


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "`")


def _summary(handler: Callable[..., object], routes: list[Route]) -> str:
    """The handler's docstring; for a handler made inside a route factory that makes only this
    route (``routes(prefix, ...)``), the factory's."""
    if handler.__doc__:
        return _first_paragraph(handler.__doc__)
    outer, _, _name = handler.__qualname__.rpartition(".<locals>.")
    factory = getattr(sys.modules[handler.__module__], outer, None) if outer == "routes" else None
    made_here = [r for r in routes if r.handler.__qualname__.startswith(f"{outer}.<locals>.")]
    return _first_paragraph(factory.__doc__) if factory is not None and len(made_here) == 1 else ""


def _module_file(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def route_table(routes: list[Route], table_module: str) -> list[str]:
    rows = ["| method | path | handler | what it does | query, body |", "|---|---|---|---|---|"]
    for route in routes:
        sources = sorted({_module_file(table_module), _module_file(route.handler.__module__)})
        method = "any" if route.method == "*" else route.method
        rows.append(f"| {method} | `{route.path}` | `{route.handler_name}` | {_cell(_summary(route.handler, routes))} "
                    f"| {_cell(_route_comment(route, sources))} |")
    return rows


def handler_modules(routes: list[Route]) -> list[str]:
    """Each module that holds handlers of ``routes``, with its docstring's first sentence."""
    rows = []
    for module in sorted({r.handler.__module__ for r in routes}):
        doc = _first_paragraph(sys.modules[module].__doc__)
        rows.append(f"- `{_module_file(module).relative_to(ROOT).as_posix()}`: {doc.split('. ')[0].rstrip('.')}.")
    return rows


# --- error codes -----------------------------------------------------------------------------------
@dataclasses.dataclass
class Sink:
    """A callable that puts a code on the wire: where its status and code come from."""

    status_at: int | str | None = None  # positional index or keyword name of ``status``
    code_at: int | str | None = None
    status: int | None = None  # the default (a class attribute, or fixed inside a function)
    code: str | None = None


@dataclasses.dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    names: dict[str, tuple[str, str]]  # local name -> (defining module, name)
    constants: dict[str, object]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load(path: Path) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    name = _module_name(path)
    names: dict[str, tuple[str, str]] = {}
    constants: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = (name, node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str | int):
                for target in targets:
                    if isinstance(target, ast.Name):
                        constants[target.id] = node.value.value
    return Module(name, path, tree, names, constants)


class Codes:
    """Every error code the servers answer with, found in their source."""

    def __init__(self) -> None:
        files = [p for d in ("daemon", "agent", "core") for p in sorted((ROOT / d).rglob("*.py"))]
        self.modules = {m.name: m for m in map(_load, files)}
        self.sinks: dict[tuple[str, str], Sink] = {}
        self.found: dict[tuple[str, str], dict[str, set]] = {}  # (server, code) -> statuses, files
        self.dynamic: dict[str, set[str]] = {}  # server -> files passing on a code known at run time
        self._find_sinks()

    # which names are sinks
    def _resolve(self, module: Module, name: str) -> tuple[str, str] | None:
        seen = 0
        key = module.names.get(name)
        while key is not None and seen < 5:  # follow re-exports
            target = self.modules.get(key[0])
            if target is None or target.names.get(key[1], key) == key:
                return key
            key, seen = target.names[key[1]], seen + 1
        return key

    def _constant(self, module: Module, node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in module.constants:
                return module.constants[node.id]
            key = self._resolve(module, node.id)
            if key is not None and key[0] in self.modules:
                return self.modules[key[0]].constants.get(key[1])
        return None

    def _find_sinks(self) -> None:
        classes: dict[tuple[str, str], tuple[Module, ast.ClassDef]] = {}
        for module in self.modules.values():
            for node in module.tree.body:
                if isinstance(node, ast.ClassDef):
                    classes[(module.name, node.name)] = (module, node)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    sink = self._signature(node.args, skip_self=False)
                    if sink is not None:
                        self.sinks[(module.name, node.name)] = sink
        changed = True
        while changed:  # a class is a sink when its __init__ says so, or a base class is one
            changed = False
            for key, (module, node) in classes.items():
                if key in self.sinks or key in CLIENT_ERRORS:
                    continue
                sink = self._class_sink(module, node)
                if sink is not None:
                    self.sinks[key] = sink
                    changed = True
        for module in self.modules.values():  # functions that hand their ``code`` to a sink
            for node in module.tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (module.name, node.name) not in self.sinks:
                    sink = self._forwarding(module, node)
                    if sink is not None:
                        self.sinks[(module.name, node.name)] = sink

    @staticmethod
    def _signature(args: ast.arguments, skip_self: bool) -> Sink | None:
        positional = [a.arg for a in args.posonlyargs + args.args][1 if skip_self else 0:]
        keyword = [a.arg for a in args.kwonlyargs]
        if "code" not in positional + keyword or "status" not in positional + keyword:
            return None

        def at(name: str) -> int | str:
            return positional.index(name) if name in positional else name

        return Sink(status_at=at("status"), code_at=at("code"))

    def _class_sink(self, module: Module, node: ast.ClassDef) -> Sink | None:
        inherited: Sink | None = None
        for base in node.bases:
            key = self._resolve(module, base.id) if isinstance(base, ast.Name) else None
            if key is not None and key in self.sinks:
                inherited = self.sinks[key]
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        own = self._signature(init.args, skip_self=True) if init is not None else None
        sink = own or inherited
        if sink is None:
            return None
        sink = dataclasses.replace(sink, status=inherited.status if inherited and own is None else sink.status,
                                   code=inherited.code if inherited and own is None else sink.code)
        declared = [(kw.arg, kw.value) for kw in node.keywords if kw.arg]  # ``class X(AgentProblem, status=409, code="...")``
        for item in node.body:  # ``status = 409`` / ``code = "..."`` class attributes
            if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
                declared.append((item.targets[0].id, item.value))
        for name, expr in declared:
            value = self._constant(module, expr)
            if name == "status" and isinstance(value, int):
                sink.status = value
            elif name == "code" and isinstance(value, str):
                sink.code = value
        return sink

    def _forwarding(self, module: Module, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Sink | None:
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        if "code" not in params:
            return None
        defaults = dict(zip(params[len(params) - len(node.args.defaults):], node.args.defaults, strict=True))
        for status, code in self._sites(module, node):
            if isinstance(code, ast.Name) and code.id == "code" and isinstance(status, int):
                default = self._constant(module, defaults["code"]) if "code" in defaults else None
                return Sink(status=status, code_at=params.index("code"),
                            code=default if isinstance(default, str) else None)
        return None

    # where codes are put on the wire
    def _argument(self, call: ast.Call, at: int | str | None) -> ast.expr | None:
        if isinstance(at, int) and at < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:at + 1]):
            return call.args[at]
        for kw in call.keywords:
            if kw.arg == (at if isinstance(at, str) else None):
                return kw.value
        return None

    def _callee(self, module: Module, call: ast.Call) -> Sink | None:
        func = call.func
        if isinstance(func, ast.Name):
            key = self._resolve(module, func.id)
            return self.sinks.get(key) if key is not None else None
        return None

    @staticmethod
    def _scoped(tree: ast.AST, function: ast.AST | None = None) -> Iterator[tuple[ast.AST, ast.AST | None]]:
        """Every node under ``tree`` with the innermost function around it."""
        yield tree, function
        inner = tree if isinstance(tree, ast.FunctionDef | ast.AsyncFunctionDef) else function
        for child in ast.iter_child_nodes(tree):
            yield from Codes._scoped(child, inner)

    @staticmethod
    def _local(function: ast.AST | None, node: ast.expr | str | None) -> ast.expr | str | None:
        """A name assigned once in ``function`` (``code = "a" if ... else "b"``) stands for its value."""
        if function is None or not isinstance(node, ast.Name):
            return node
        values = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign) and len(n.targets) == 1
                  and isinstance(n.targets[0], ast.Name) and n.targets[0].id == node.id]
        return values[0] if len(values) == 1 else node

    def _sites(self, module: Module, tree: ast.AST) -> Iterator[tuple[object, ast.expr | str | None]]:
        """(status, code) of every place under ``tree`` that puts a code on the wire: the status as
        a value (None: decided at run time), the code as an expression or a string."""
        for node, function in self._scoped(tree):
            for status, code in self._site(module, node):
                yield status, self._local(function, code)

    def _site(self, module: Module, node: ast.AST) -> Iterator[tuple[object, ast.expr | str | None]]:
        """The (status, code) that ``node`` itself puts on the wire, if any."""
        if isinstance(node, ast.Call):
            sink = self._callee(module, node)
            if sink is not None:
                status_node = self._argument(node, sink.status_at)
                status = self._constant(module, status_node) if status_node is not None else sink.status
                code_node = self._argument(node, sink.code_at)
                yield status, code_node if code_node is not None else sink.code
            status_kw = next((kw.value for kw in node.keywords if kw.arg == "status"), None)
            for arg in node.args:
                error = self._error_dict(arg)
                if error is not None:
                    yield (self._constant(module, status_kw) if status_kw is not None else None), error
        elif isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
            error = self._error_dict(node.value, top=True)
            if error is not None:
                yield None, error
        elif (isinstance(node, ast.Tuple) and len(node.elts) == 3
              and isinstance(self._constant(module, node.elts[0]), int)
              and 400 <= int(self._constant(module, node.elts[0])) < 600):  # type: ignore[arg-type]
            yield self._constant(module, node.elts[0]), node.elts[1]

    @staticmethod
    def _error_dict(node: ast.expr, top: bool = False) -> ast.expr | None:
        """The ``code`` of ``{"error": {"code": ..., "message": ...}}`` (or, with ``top``, of the inner dict)."""
        if not isinstance(node, ast.Dict):
            return None
        keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if top and "code" in keys and "message" in keys:
            return keys["code"]
        inner = keys.get("error")
        if isinstance(inner, ast.Dict):
            return Codes._error_dict(inner, top=True)
        return None

    def _codes(self, module: Module, node: ast.expr | str | None) -> list[str] | None:
        if isinstance(node, str):
            return [node]
        if isinstance(node, ast.IfExp):
            both = [self._codes(module, node.body), self._codes(module, node.orelse)]
            return None if None in both else [c for codes in both for c in codes or []]
        value = self._constant(module, node) if isinstance(node, ast.expr) else None
        return [value] if isinstance(value, str) else None

    def scan(self) -> None:
        for module in self.modules.values():
            rel = module.path.relative_to(ROOT).as_posix()
            if not any(rel == s or rel.startswith(s + "/") for s in SERVER_SOURCES):
                continue
            server = rel.split("/")[0] if rel.split("/")[0] in ("daemon", "agent") else "both"
            parts = [n for n in module.tree.body if (module.name, getattr(n, "name", "")) not in self.sinks]
            for status, code in (site for part in parts for site in self._sites(module, part)):
                codes = self._codes(module, code)
                if codes is None:
                    self.dynamic.setdefault(server, set()).add(rel)
                    continue
                for value in codes:
                    entry = self.found.setdefault((server, value), {"status": set(), "files": set()})
                    if isinstance(status, int):
                        entry["status"].add(status)
                    entry["files"].add(rel)

    def table(self, server: str) -> list[str]:
        rows = ["| code | HTTP status | answered from |", "|---|---|---|"]
        for (where, code), entry in sorted(self.found.items(), key=lambda item: item[0][1]):
            if where in (server, "both"):
                status = ", ".join(str(s) for s in sorted(entry["status"])) or "—"
                files = ", ".join(f"`{f}`" for f in sorted(entry["files"]))
                rows.append(f"| `{code}` | {status} | {files} |")
        return rows

    def count(self, server: str) -> int:
        return sum(1 for where, _code in self.found if where in (server, "both"))


# --- the document ----------------------------------------------------------------------------------
def render() -> str:
    daemon, ollama, agent, pairing = daemon_routes(), ollama_routes(), agent_routes(), pairing_routes()
    codes = Codes()
    codes.scan()
    out = [
        "# MirbadLLM reference",
        "",
        "Generated by `docs/gen_reference.py` from the code (`make docs`); do not edit by hand.",
        "`tests/unit/test_docs_reference.py` fails when this file is not what the generator writes now.",
        "The map of the code, and why it is shaped so, is [architecture.md](architecture.md).",
        "",
        "## Daemon routes",
        "",
        f"{len(daemon)} routes, from `daemon/routes.py` (the one route table). `/healthz` and `/metrics` need no",
        "token, `/v1` an API key when keys are required, `/api` the admin token. Errors use the OpenAI shape",
        "`{\"error\": {\"message\", \"type\", \"code\", \"request_id\"}}` (`daemon/errors.py`).",
        "",
        *route_table(daemon, "daemon.routes"),
        "",
        "The handlers live with their features:",
        "",
        *handler_modules(daemon),
        "",
        "## Ollama API routes",
        "",
        f"{len(ollama)} routes on the Ollama API's own port (`ollama_port`, 11434 by default; off when taken), from",
        "`ollama_route_table` in `daemon/routes.py`. Each call becomes its /v1 call with the caller's key (`daemon/ollama/`),",
        "so /v1's keys, limits and access log apply; `/api/version` and `/` need none. Errors use Ollama's shape,",
        "`{\"error\": \"...\"}`, with /v1's status (an unknown model: 404 `model 'x' not found`; a bad body: 400).",
        "",
        *route_table(ollama, "daemon.routes"),
        "",
        "## Agent routes",
        "",
        f"{len(agent)} routes of a paired agent, over mutual TLS, from `create_app` in `agent/server.py` (the",
        "feature modules add theirs through it). Errors are `{\"error\": {\"code\", \"message\"}}`, with `details`",
        "for an `AgentProblem`. Only the daemon's pinned certificate reaches these routes; another node's agent",
        "reaches only the RPC tunnel (`agent/rpc/peers.py`).",
        "",
        *route_table(agent, "agent.server"),
        "",
        "The handlers live in:",
        "",
        *handler_modules(agent),
        "",
        f"An unpaired agent answers only these {len(pairing)} routes (`agent/pairing/server.py`, TLS without a",
        "client certificate); anything else is 404 `not_paired`.",
        "",
        *route_table(pairing, "agent.pairing.server"),
        "",
        "## Error codes",
        "",
        "Each code a server answers with, the HTTP statuses it is answered with (— where the status is handed in",
        "at run time), and the files that answer it. Found in the source (`daemon/`, `agent/`, `core/relay.py`) by the rules in the",
        "generator's docstring. Beside these, both servers answer aiohttp's own HTTP errors with the reason as",
        "the code (`not_found`, `method_not_allowed`), and `upstream_broken` is the error event that ends an SSE",
        "stream whose runtime died mid-answer (`core/relay.py`).",
        "",
        f"### Daemon ({codes.count('daemon')} codes)",
        "",
        *codes.table("daemon"),
        "",
        f"### Agent ({codes.count('agent')} codes)",
        "",
        *codes.table("agent"),
        "",
        "### Codes decided at run time",
        "",
        "These files also answer with a code held in a variable (most often an agent's refusal passed on by the",
        "daemon with its own status and code), so its value is not in the tables above:",
        "",
        *(f"- {server}: " + ", ".join(f"`{f}`" for f in sorted(files)) for server, files in sorted(codes.dynamic.items())),
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/reference.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
        if current != text:
            print(f"{REFERENCE.relative_to(ROOT)} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    REFERENCE.write_text(text, encoding="utf-8")
    print(f"wrote {REFERENCE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
