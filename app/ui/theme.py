"""Light and dark themes: Fusion, a ``QPalette`` and one style sheet filled from the theme's colours.

"system" follows the OS colour scheme (Qt 6.5+ ``styleHints().colorScheme()``) and switches live
when the OS does.
"""

from __future__ import annotations

import json
from functools import lru_cache

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

from app.ui.resources import resource
from app.viewmodels.observable import Emitter

_current: dict[str, str] = {}
_mode = "system"
changed: Emitter[str] = Emitter()  # the theme name, after it was applied: re-colour icons and charts


@lru_cache(maxsize=4)
def colors(name: str) -> dict[str, str]:
    return dict(json.loads(resource("themes", f"{name}.json").read_text(encoding="utf-8")))


def style_sheet(name: str) -> str:
    qss = resource("themes", "app.qss").read_text(encoding="utf-8")
    for key, value in colors(name).items():
        qss = qss.replace(f"@{key}@", value)
    return qss.replace("@icons@", resource("icons").as_posix())


def resolve(mode: str) -> str:
    if mode in ("light", "dark"):
        return mode
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", lambda: Qt.ColorScheme.Unknown)()
    return "dark" if scheme == Qt.ColorScheme.Dark else "light"


def palette(name: str) -> QPalette:
    c = {k: QColor(v) for k, v in colors(name).items()}
    pal = QPalette()
    roles = {
        QPalette.ColorRole.Window: c["window"], QPalette.ColorRole.WindowText: c["text"],
        QPalette.ColorRole.Base: c["input"], QPalette.ColorRole.AlternateBase: c["code"],
        QPalette.ColorRole.Text: c["text"], QPalette.ColorRole.Button: c["surface"],
        QPalette.ColorRole.ButtonText: c["text"], QPalette.ColorRole.Highlight: c["accent"],
        QPalette.ColorRole.HighlightedText: c["accent_text"], QPalette.ColorRole.ToolTipBase: c["surface"],
        QPalette.ColorRole.ToolTipText: c["text"], QPalette.ColorRole.PlaceholderText: c["muted"],
        QPalette.ColorRole.Link: c["accent"], QPalette.ColorRole.Mid: c["border"],
    }
    for role, color in roles.items():
        pal.setColor(role, color)
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, c["muted"])
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, c["muted"])
    return pal


def apply(app: QApplication, mode: str = "system") -> str:
    """Apply ``mode`` (light | dark | system); returns the theme actually used."""
    global _mode
    _mode = mode
    name = resolve(mode)
    app.setStyle(QStyleFactory.create("Fusion"))
    app.setPalette(palette(name))
    app.setStyleSheet(style_sheet(name))
    _current.clear()
    _current.update(colors(name), name=name)
    changed.emit(name)
    return name


def follow_system(app: QApplication) -> None:
    """Re-apply when the OS switches light/dark while we follow it."""
    hints = QGuiApplication.styleHints()
    if hasattr(hints, "colorSchemeChanged"):
        hints.colorSchemeChanged.connect(lambda _scheme: _mode == "system" and apply(app, "system"))


def color(key: str) -> str:
    """A colour of the current theme (``ready``, ``accent``, …)."""
    if not _current:
        return colors("light")[key]
    return _current[key]


def current_name() -> str:
    return _current.get("name", "light")
