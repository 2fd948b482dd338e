"""One implementation per job: a file's SHA-256 is ``core.hashing``'s, a whole-file atomic write is
``core.json_store``'s. Product code outside ``core`` that hashes a file it reads, or renames a temp
file into place by hand, is a second implementation; the sites that move something else into place
(a verified download, a folder, an executable, a rotated log) are listed below with their reason.
A violation names the file and the function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "daemon", "agent", "installers", "mirbadllm", "bench")  # core is where the one copy lives

HASHES = {"sha256", "sha1", "new", "file_digest"}  # hashlib.<name>(...)
READS = {"read", "read_bytes", "readinto"}
RENAMES = {("os", "replace"), ("os", "rename"), ("tempfile", "mkstemp"), ("tempfile", "NamedTemporaryFile")}

#: ``path::function`` -> why it is not ``core.json_store.write_atomic``.
RENAME_SITES = {
    "daemon/pki.py::install_ca_pem":
        "two files, one commit: the CA certificate is staged before its key is written, published after",
    "agent/service/install.py::RealSystem.copy":
        "copies a program file and chowns it to the service user before the rename (no bytes in memory)",
    "installers/appimage.py::assemble":
        "streams the runtime and a large squashfs image to .part, then renames it (stream-then-rename)",
    "daemon/runtimes/build.py::load_build":
        "tar streams the pack to .partial, then renames it (stream-then-rename)",
    "daemon/runtimes/packs.py::_unpack":
        "moves an unpacked build folder into place",
    "agent/runtimes/rollout.py::LlamaCppBuilds._install":
        "moves a verified build folder into place",
    "installers/agent_build.py::build":
        "moves the frozen agent PyInstaller wrote into dist under its release name (no bytes in memory)",
    "daemon/upgrades/feed.py::_build":
        "streams a checked agent build to .partial, then renames it (stream-then-rename)",
    "agent/upgrade.py::DebInstaller.apply":
        "moves the verified upgrade package to the one path the package's root helper installs from",
    "app/updates/checker.py::UpdateChecker._stage":
        "moves a verified download into the staging folder (stream-then-rename)",
    "app/updates/installer.py::MacInstaller.apply":
        "swaps a whole .app folder in place, keeping the previous one",
    "agent/sources/fetch.py::fetch_file":
        "moves a download verified against its checksum into place (stream-then-rename)",
    "agent/sources/imports.py::_place":
        "moves a linked or copied blob into place once its digest is verified",
    "agent/sources/mirror.py::MirrorReceiver.commit":
        "moves mirrored files, received in pieces and verified, into place",
    "agent/runtimes/llamacpp.py::_rotate":
        "rotates the runtime's log to .1 (a rename, not a write)",
    "agent/runtimes/mlx.py::MlxDriver.launch":
        "rotates the runtime's log to .1 (a rename, not a write)",
    "installers/llamacpp_runtime.py::fetch_sdist":
        "moves the downloaded sdist into the cache once its SHA-256 is checked (stream-then-rename)",
    "installers/llamacpp_runtime.py::_copy_build":
        "moves a copied build folder into place",
    "installers/llamacpp_runtime.py::_build":
        "moves a finished build folder into place",
}


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """Every call in ``tree`` with the qualified name of the function it sits in ("" at the top)."""
    found: list[tuple[str, ast.Call]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, f"{where}.{child.name}" if where else child.name)
            else:
                if isinstance(child, ast.Call):
                    found.append((where, child))
                visit(child, where)

    visit(tree, "")
    return found


def _attr_call(call: ast.Call) -> tuple[str, str] | None:
    """``("os", "replace")`` for ``os.replace(...)``; ``("", "read")`` for ``fh.read(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return owner, func.attr
    if isinstance(func, ast.Name):
        return "", func.id
    return None


def file_hashes(source: str) -> list[str]:
    """Functions that make a hashlib digest and read a file: a file hash of their own."""
    hashing: set[str] = set()
    reading: set[str] = set()
    for where, call in _calls(ast.parse(source)):
        name = _attr_call(call)
        if name is None:
            continue
        if name[0] == "hashlib" and name[1] in HASHES:
            hashing.add(where)
        if name[1] in READS and name[0] not in ("os", "hashlib"):
            reading.add(where)
    return sorted(hashing & reading)


def _path_rename(call: ast.Call) -> bool:
    """``tmp.replace(path)`` / ``tmp.rename(path)``: pathlib's rename. ``str.replace`` takes two
    arguments, ``dataclasses.replace`` keywords, a chart series' ``replace`` a list."""
    return (isinstance(call.func, ast.Attribute) and call.func.attr in ("replace", "rename")
            and len(call.args) == 1 and not call.keywords
            and isinstance(call.args[0], ast.Name | ast.Attribute | ast.Call | ast.BinOp))


def renames(source: str) -> list[str]:
    """Functions that rename into place or make temp files by hand (``os.replace``, ``mkstemp``,
    ``Path.replace``...)."""
    return sorted({where for where, call in _calls(ast.parse(source))
                   if _attr_call(call) in RENAMES or _path_rename(call)
                   or _attr_call(call) in {("", "mkstemp"), ("", "NamedTemporaryFile")}})


def _product_files() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def _sites(check: callable) -> list[str]:
    return [f"{path.relative_to(ROOT).as_posix()}::{where}" for path in _product_files()
            for where in check(path.read_text(encoding="utf-8"))]


def test_a_file_is_hashed_by_core_hashing_only() -> None:
    assert _sites(file_hashes) == [], "hash a file with core.hashing.file_sha256 (or update_from_file)"


def test_whole_files_are_written_by_core_json_store_only() -> None:
    unlisted = [site for site in _sites(renames) if site not in RENAME_SITES]
    assert unlisted == [], "write a whole file with core.json_store.write_atomic / write_json_atomic"


def test_every_listed_rename_still_exists() -> None:
    """A site that went away leaves its entry behind; the list stays the truth."""
    assert sorted(set(RENAME_SITES) - set(_sites(renames))) == []


def test_the_check_sees_a_violation() -> None:
    """The checkers themselves must catch a second implementation, or the tests above prove nothing."""
    assert file_hashes(
        "import hashlib\n"
        "def _sha256(path):\n"
        "    digest = hashlib.sha256()\n"
        "    with path.open('rb') as fh:\n"
        "        for block in iter(lambda: fh.read(1 << 20), b''):\n"
        "            digest.update(block)\n"
        "    return digest.hexdigest()\n"
        "class Cache:\n"
        "    def get(self, path):\n"
        "        return hashlib.sha256(path.read_bytes()).hexdigest()\n") == ["Cache.get", "_sha256"]
    assert file_hashes("import hashlib\ndef node_id(der):\n    return hashlib.sha256(der).hexdigest()\n") == []
    assert renames(
        "import os, tempfile\n"
        "def save(path, data):\n"
        "    tmp = path.with_name(path.name + '.tmp')\n"
        "    tmp.write_bytes(data)\n"
        "    os.replace(tmp, path)\n"
        "class Store:\n"
        "    async def write(self):\n"
        "        fd, tmp = tempfile.mkstemp(dir='.')\n") == ["Store.write", "save"]
    assert renames("def publish(tmp, path):\n    tmp.replace(path)\n") == ["publish"]
    assert renames("def f(s, series, points):\n    series.replace([p for p in points])\n"
                   "    return s.replace('a', 'b'), replace(s, at=1)\n") == []
