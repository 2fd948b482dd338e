"""A PyInstaller spec run as PyInstaller runs it, for a chosen OS, with each build step recorded."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Recorded:
    """What the spec hands one of PyInstaller's build steps (Analysis, PYZ, EXE, COLLECT, BUNDLE)."""

    made: ClassVar[list[Recorded]] = []

    def __init__(self, kind: str, *args: object, **kwargs: object) -> None:
        self.kind, self.args, self.kwargs = kind, args, kwargs
        self.name = kwargs.get("name")
        # distinct lists, so a step handed the analysis' binaries or datas can be told (a one-file EXE)
        self.pure: list[object] = []
        self.scripts: list[object] = []
        self.binaries: list[object] = []
        self.datas: list[object] = []
        Recorded.made.append(self)


def analysed(platform: str, monkeypatch: pytest.MonkeyPatch, spec_name: str = "mirbadllm.spec") -> list[Recorded]:
    """``installers/pyinstaller/<spec_name>`` run for ``platform`` (sys.platform's spelling)."""
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda name: [name]  # type: ignore[attr-defined]
    hooks.copy_metadata = lambda name: []  # type: ignore[attr-defined]
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setattr(sys, "platform", platform)
    Recorded.made = []
    spec = ROOT / "installers" / "pyinstaller" / spec_name
    steps = {kind: (lambda *a, _k=kind, **kw: Recorded(_k, *a, **kw))
             for kind in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")}
    exec(compile(spec.read_text(), str(spec), "exec"), {"SPECPATH": str(spec.parent), **steps})  # noqa: S102
    return Recorded.made


def named_paths(made: list[Recorded]) -> list[str]:
    """Every file the spec names: the entry scripts, the data sources, icons and entitlements."""
    analysis = next(m for m in made if m.kind == "Analysis")
    named = [*analysis.args[0], *(source for source, _dest in analysis.kwargs["datas"])]  # type: ignore[attr-defined]
    for exe in (m for m in made if m.kind in ("EXE", "BUNDLE")):
        named += [v for k, v in exe.kwargs.items() if k in ("icon", "entitlements_file") and v]
    return [str(p) for p in named]
