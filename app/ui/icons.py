"""Icons drawn from the SVGs in ``resources/icons``: line icons take the theme's text colour."""

from __future__ import annotations

import functools
from pathlib import Path

from PySide6.QtCore import QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QIcon, QImage, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.ui import theme
from app.ui.resources import resource
from app.viewmodels.fleet import FleetState

TRAY_ICONS = {state: f"tray-{state.value}" for state in FleetState}


def _render(svg: bytes, size: int) -> QPixmap:
    renderer = QSvgRenderer(QByteArray(svg))
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return QPixmap.fromImage(image)


def svg_icon(name: str, color: str | None = None, sizes: tuple[int, ...] = (16, 20, 24, 32, 48, 64)) -> QIcon:
    """``resources/icons/{name}.svg`` as a QIcon; ``@COLOR@`` becomes ``color`` (default: text)."""
    path = resource("icons", f"{name}.svg")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return QIcon()
    text = text.replace("@COLOR@", color or theme.color("text")).replace("@BG@", theme.color("sidebar"))
    return QIcon(_drawn(text, sizes))  # a copy: what a caller adds to it stays its own


@functools.lru_cache(maxsize=512)
def _drawn(svg: str, sizes: tuple[int, ...]) -> QIcon:
    """An icon drawn once per SVG text (its colours in) and sizes: every window and theme switch asks again."""
    icon = QIcon()
    for size in sizes:
        icon.addPixmap(_render(svg.encode(), size))
    return icon


def app_icon() -> QIcon:
    return svg_icon("app", sizes=(16, 24, 32, 48, 64, 128, 256))


def tray_icon(state: FleetState) -> QIcon:
    return svg_icon(TRAY_ICONS[state], sizes=(16, 22, 24, 32, 48, 64))


def state_dot(color: str, size: int = 12) -> QIcon:
    pix = QPixmap(QSize(size, size))
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(color))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, size - 2, size - 2)
    painter.end()
    return QIcon(pix)


def export_pngs(out: Path, sizes: tuple[int, ...] = (16, 32, 64, 256)) -> list[Path]:
    """Write PNG copies of the app and tray icons (for packagers and platforms without SVG)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ["app", *TRAY_ICONS.values()]:
        svg = resource("icons", f"{name}.svg").read_bytes()
        for size in sizes:
            path = out / f"{name}-{size}.png"
            _render(svg, size).save(str(path))
            written.append(path)
    return written
