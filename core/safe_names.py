"""Names and paths that come from outside, judged before any path is built from them.

Pure functions shared by the daemon (which checks a definition when it is saved) and the agent
(which checks again before it touches a file). Every rule holds under POSIX *and* Windows
semantics, whatever this machine runs: a name that is harmless here may be a drive, a device or a
UNC share on the node that finally uses it (huggingface_hub#4540, CVE-2024-37032).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import ModuleType

MAX_COMPONENT = 255
MAX_RELATIVE = 1024
MAX_NODE_PATH = 4096

# Ollama names blobs by digest; a digest is only ever accepted in exactly this shape.
DIGEST_RE = re.compile(r"sha256[:-][0-9a-f]{64}")
HF_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
HF_REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,127}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE_RE = re.compile(r"[A-Za-z]:")
_WINDOWS_ABSOLUTE_RE = re.compile(r"[A-Za-z]:[\\/]")
_WINDOWS_DEVICES = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$",
                    *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


class UnsafeName(ValueError):
    """A name or path that could leave its directory, or mean something else on another OS."""


def _plain(text: str, what: str, limit: int) -> None:
    if not text:
        raise UnsafeName(f"{what} is empty")
    if len(text) > limit:
        raise UnsafeName(f"{what} is longer than {limit} characters")
    if _CONTROL_RE.search(text):
        raise UnsafeName(f"{what} contains a NUL or control character")


def check_component(part: str, what: str = "name") -> str:
    """One path component: no separators, dots-only, drive, stream, device or trailing dot/space."""
    _plain(part, what, MAX_COMPONENT)
    if part in (".", ".."):
        raise UnsafeName(f"{what} may not be {part!r}")
    if "/" in part or "\\" in part:
        raise UnsafeName(f"{what} {part!r} contains a path separator")
    if ":" in part:  # D:x is drive-relative on Windows; a:b names an NTFS stream
        raise UnsafeName(f"{what} {part!r} contains ':'")
    if part[-1] in ". ":  # Windows drops them: 'x.gguf.' and 'x.gguf' would be one file
        raise UnsafeName(f"{what} {part!r} ends with a dot or a space")
    if part.split(".", 1)[0].upper() in _WINDOWS_DEVICES:
        raise UnsafeName(f"{what} {part!r} is a Windows device name")
    return part


def check_relative_name(name: str, what: str = "file name", *, allow_subdirs: bool = True) -> str:
    """A name relative to a directory (a repo file, a download target): it must stay inside."""
    _plain(name, what, MAX_RELATIVE)
    if "\\" in name:
        raise UnsafeName(f"{what} {name!r} contains a backslash (a separator on Windows)")
    if name.startswith("/"):
        raise UnsafeName(f"{what} {name!r} is absolute")
    if _DRIVE_RE.match(name):
        raise UnsafeName(f"{what} {name!r} names a drive")
    parts = name.split("/")
    if len(parts) > 1 and not allow_subdirs:
        raise UnsafeName(f"{what} {name!r} may not contain '/'")
    for part in parts:
        if part == "":
            raise UnsafeName(f"{what} {name!r} has an empty path component")
        check_component(part, what)
    return name


def _node_parts(path: str) -> list[str]:
    return [p for p in re.split(r"[\\/]", path) if p]


def is_windows_path(path: str) -> bool:
    return bool(_WINDOWS_ABSOLUTE_RE.match(path))


def check_node_path(path: str, what: str = "model_path") -> str:
    """An absolute path on a node (POSIX ``/...`` or Windows ``X:\\...``), without ``..`` or UNC."""
    _plain(path, what, MAX_NODE_PATH)
    if path.startswith(("\\", "//")):
        raise UnsafeName(f"{what} {path!r} is a UNC or device path; use a local path")
    if not (path.startswith("/") or is_windows_path(path)):
        raise UnsafeName(f"{what} {path!r} must be absolute (/... or C:\\...)")
    if any(part == ".." for part in _node_parts(path)):
        raise UnsafeName(f"{what} {path!r} contains '..'")
    if is_windows_path(path) and ":" in path[2:]:
        raise UnsafeName(f"{what} {path!r} contains ':' after the drive (an NTFS stream)")
    return path


def folder_of(path: str) -> str:
    """The folder part of an absolute node path, under the path's own OS rules."""
    cut = max(path.rfind("/"), path.rfind("\\"))
    return path[:cut] if cut > 0 else path[:1]


def lexically_inside(folder: str, path: str) -> bool:
    """Whether the absolute node ``path`` lies inside ``folder``, judged by text alone.

    Used where the files are on another machine (the daemon judging a definition). Windows paths
    compare case-insensitively with either separator. Symlinks are the agent's to judge.
    """
    parts = _comparable(folder, path, check=(path,))
    if parts is None:
        return False
    base, target = parts
    return len(target) > len(base) and target[: len(base)] == base


def lexically_same(a: str, b: str) -> bool:
    """Whether two absolute node paths name one file, judged by text alone (``lexically_inside``'s
    rules: Windows paths case-insensitively, with either separator; repeated separators ignored)."""
    parts = _comparable(a, b, check=(a, b))
    return parts is not None and parts[0] == parts[1]


def _comparable(a: str, b: str, check: tuple[str, ...]) -> tuple[list[str], list[str]] | None:
    """Both paths' parts, ready to compare (Windows ones case-folded); None when a path in ``check``
    is not a safe node path or only one of them is a Windows path."""
    try:
        for path in check:
            check_node_path(path, "path")
    except UnsafeName:
        return None
    windows = is_windows_path(a)
    if windows != is_windows_path(b):
        return None
    left, right = _node_parts(a), _node_parts(b)
    if windows:
        left, right = [p.casefold() for p in left], [p.casefold() for p in right]
    return left, right


def commonpath_inside(folder: str | os.PathLike[str], path: str | os.PathLike[str],
                      pathmod: ModuleType = os.path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it, by ``pathmod.commonpath`` (``os.path`` here,
    ``ntpath``/``posixpath`` to judge another OS's paths).

    ``commonpath`` raises ValueError when the two have nothing in common on Windows (C:\\ vs D:\\,
    a drive vs a UNC share) or mix absolute and relative: that is "outside", never a crash.
    """
    root, target = os.fspath(folder), os.fspath(path)
    try:
        return bool(pathmod.commonpath([root, target]) == pathmod.commonpath([root]))
    except ValueError:
        return False


def real_inside(folder: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies strictly below ``folder`` on this disk, symlinks resolved (the folder
    itself is not inside)."""
    root, real = os.path.realpath(folder), os.path.realpath(path)
    return real != root and commonpath_inside(root, real)


def link_out_of(root: Path, path: Path) -> Path | None:
    """The first part of ``path`` (below ``root``) that exists and resolves outside ``root``: a
    link out of the folder on the way to a file about to be written; None when there is none."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if (current.is_symlink() or current.exists()) and not real_inside(root, current):
            return current
    return None


def is_digest(value: str) -> bool:
    return DIGEST_RE.fullmatch(value) is not None


def check_digest(value: str, what: str = "digest") -> str:
    """``sha256:<64 lowercase hex>`` (or ``sha256-``), checked before a path is built from it."""
    if not isinstance(value, str) or not is_digest(value):
        raise UnsafeName(f"{what} {str(value)[:80]!r} is not sha256:<64 hex digits>")
    return value


def check_hf_repo(repo: str) -> str:
    if HF_REPO_RE.fullmatch(repo) is None or ".." in repo or "--" in repo:
        raise UnsafeName(f"Hugging Face repo {repo[:120]!r} is not owner/name")
    return repo


def check_hf_revision(revision: str) -> str:
    if HF_REVISION_RE.fullmatch(revision) is None or ".." in revision or "//" in revision:
        raise UnsafeName(f"revision {revision[:120]!r} is not a branch, tag or commit")
    return revision
