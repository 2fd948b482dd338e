"""Small building blocks shared by the pages: cards, state badges, gauges, copyable fields."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QGuiApplication, QShowEvent, QWheelEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from app.format import STATE_TEXT
from app.ui import theme
from app.ui.icons import svg_icon
from app.viewmodels.observable import Emitter
from daemon.api.models import ModelState

T = TypeVar("T")


def bind(widget: QObject, source: Emitter[T], callback: Callable[[T], None]) -> None:
    """Subscribe ``callback`` for as long as ``widget`` lives (module-wide emitters outlive widgets)."""
    unsubscribe = source.subscribe(callback)
    widget.destroyed.connect(lambda *_args: unsubscribe())


def set_prop(widget: QWidget, name: str, value: object) -> None:
    """Set a dynamic property the style sheet keys on, and re-polish so it shows."""
    if widget.property(name) == value:
        return
    widget.setProperty(name, value)
    widget.style().unpolish(widget)
    widget.style().polish(widget)


def label(text: str = "", *, role: str | None = None, muted: bool = False, wrap: bool = False,
          selectable: bool = False, name: str = "") -> QLabel:
    """A label; ``name`` is its object name (what the style sheet and the tests find it by)."""
    lbl = QLabel(text)
    if name:
        lbl.setObjectName(name)
    if role:
        lbl.setProperty("role", role)
    if muted:
        lbl.setProperty("muted", True)
    lbl.setWordWrap(wrap)
    if selectable:
        lbl.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return lbl


def line_edit(placeholder: str = "", *, name: str = "", password: bool = False, clearable: bool = False) -> QLineEdit:
    """A one-line text field: its placeholder, object name, hidden input (a secret) and clear button."""
    edit = QLineEdit()
    if name:
        edit.setObjectName(name)
    if password:
        edit.setEchoMode(QLineEdit.EchoMode.Password)
    edit.setPlaceholderText(placeholder)
    edit.setClearButtonEnabled(clearable)
    return edit


_THEMED: list[tuple[weakref.ref[QPushButton], str]] = []


def _recolor(_name: str) -> None:
    alive = []
    for ref, icon in _THEMED:
        btn = ref()
        try:
            if btn is not None:
                btn.setIcon(svg_icon(icon))
                alive.append((ref, icon))
        except RuntimeError:  # the C++ side is gone
            pass
    _THEMED[:] = alive


theme.changed.subscribe(_recolor)


def button(text: str, *, kind: str | None = None, icon: str | None = None, color: str | None = None,
           name: str = "", on_click: Callable[[], object] | None = None) -> QPushButton:
    """A push button; ``name`` is its object name, ``on_click`` what a click does."""
    btn = QPushButton(text)
    if name:
        btn.setObjectName(name)
    if on_click is not None:
        btn.clicked.connect(on_click)
    if kind:
        btn.setProperty("kind", kind)
    if icon:
        btn.setIcon(svg_icon(icon, color))
        if color is None:  # drawn in the text colour: follow the theme
            _THEMED.append((weakref.ref(btn), icon))
    btn.setCursor(Qt.CursorShape.PointingHandCursor)
    return btn


class ReadOnShow:
    """A page that reads its view-model again each time it is shown (``ctx.act(vm.refresh())``):
    what it lists changes behind its back while another page is open."""

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)  # type: ignore[misc]
        self.ctx.act(self.vm.refresh())  # type: ignore[attr-defined]


class _StillWheel:
    """A field the mouse wheel does not change while the page scrolls past it: only once it has
    the keyboard focus (clicked or tabbed to), as a user expects of a settings form."""

    def _still(self) -> None:
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # type: ignore[attr-defined]

    def wheelEvent(self, event: QWheelEvent) -> None:
        if self.hasFocus():  # type: ignore[attr-defined]
            super().wheelEvent(event)  # type: ignore[misc]
        else:
            event.ignore()  # the scroll area behind scrolls instead


class StillComboBox(_StillWheel, QComboBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._still()


def combo_box(name: str, choices: Iterable[tuple[str, object]] = (), *, tooltip: str = "") -> StillComboBox:
    """A drop-down that ignores the wheel: its object name, its (title, value) choices, its tooltip."""
    box = StillComboBox()
    box.setObjectName(name)
    for title, value in choices:
        box.addItem(title, value)
    if tooltip:
        box.setToolTip(tooltip)
    return box


class StillSpinBox(_StillWheel, QSpinBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._still()


class StillDoubleSpinBox(_StillWheel, QDoubleSpinBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._still()


class Card(QFrame):
    """A rounded surface; ``body`` is its vertical layout."""

    def __init__(self, title: str = "", parent: QWidget | None = None, *, attention: bool = False) -> None:
        super().__init__(parent)
        self.setProperty("card", "attention" if attention else "true")
        self.body = QVBoxLayout(self)
        self.body.setContentsMargins(18, 14, 18, 16)
        self.body.setSpacing(8)
        if title:
            self.body.addWidget(label(title.upper(), role="section"))


class StateBadge(QLabel):
    def __init__(self, state: ModelState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.set_state(state)

    def set_state(self, state: ModelState | None, text: str | None = None) -> None:
        self.setText(text or (STATE_TEXT[state] if state else "—"))
        set_prop(self, "badge", state.value if state else "unknown")


class Gauge(QWidget):
    """A label, a bar and the figure: CPU 37 %, Memory 12.0 of 32.0 GiB."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        top = QHBoxLayout()
        self.title = label(title)
        # A GPU's long name gives way (its whole name in the tooltip): a gauge never widens the page
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.title.setMinimumWidth(60)
        self.title.setToolTip(title)
        self.figure = label("—", muted=True)
        top.addWidget(self.title, 1)  # the room the figure leaves
        top.addWidget(self.figure)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        layout.addLayout(top)
        layout.addWidget(self.bar)

    def set_value(self, fraction: float | None, figure: str) -> None:
        self.figure.setText(figure)
        value = 0 if fraction is None else max(0.0, min(1.0, fraction))
        self.bar.setValue(int(value * 1000))
        set_prop(self.bar, "level", "critical" if value > 0.92 else "high" if value > 0.8 else "normal")


class CopyField(QWidget):
    """A read-only value with a Copy button (the API URL, a new key)."""

    def __init__(self, value: str = "", parent: QWidget | None = None, *, monospace: bool = True) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.edit = QLineEdit(value)
        self.edit.setReadOnly(True)
        if monospace:
            self.edit.setStyleSheet("font-family: 'DejaVu Sans Mono', 'Menlo', 'Consolas', monospace;")
        self.copy_button = button("Copy", icon="action-copy")
        self.copy_button.clicked.connect(self.copy)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.copy_button)

    def set_value(self, value: str) -> None:
        if self.edit.text() != value:
            self.edit.setText(value)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.edit.text())
        self.copy_button.setText("Copied")


def page_header(title: str, subtitle: str = "") -> QWidget:
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 6)
    layout.setSpacing(2)
    head = QLabel(title)
    head.setObjectName("PageTitle")
    layout.addWidget(head)
    if subtitle:
        sub = QLabel(subtitle)
        sub.setObjectName("PageSubtitle")
        sub.setWordWrap(True)
        layout.addWidget(sub)
    return box


def page(parent: QWidget | None = None) -> tuple[QWidget, QVBoxLayout]:
    widget = QWidget(parent)
    widget.setObjectName("Page")
    layout = QVBoxLayout(widget)
    layout.setContentsMargins(28, 22, 28, 22)
    layout.setSpacing(14)
    return widget, layout


def filled_page(owner: QWidget, title: str, subtitle: str) -> QVBoxLayout:
    """Fill ``owner`` edge to edge with a ``page`` headed by ``title`` and ``subtitle``; its layout."""
    body, layout = page(owner)
    outer = QVBoxLayout(owner)
    outer.setContentsMargins(0, 0, 0, 0)
    outer.addWidget(body)
    layout.addWidget(page_header(title, subtitle))
    return layout


def value_form(fields: Sequence[tuple[str, str]], name_prefix: str) -> tuple[QFormLayout, dict[str, QLabel]]:
    """A form of read-only values: for each (key, title) of ``fields``, the title (muted) and a
    selectable "—" named ``{name_prefix}-{key}``; the form and those values by key."""
    form = QFormLayout()
    form.setHorizontalSpacing(24)
    values: dict[str, QLabel] = {}
    for key, title in fields:
        value = label("—", selectable=True)
        value.setObjectName(f"{name_prefix}-{key}")
        values[key] = value
        form.addRow(label(title, muted=True), value)
    return form, values


def fit_columns(table: QTableWidget, *stretch: int) -> None:
    """The columns ``stretch`` share the width left; every other column fits its contents."""
    header = table.horizontalHeader()
    for col in range(table.columnCount()):
        header.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch if col in stretch
                                    else QHeaderView.ResizeMode.ResizeToContents)


def select_only(table: QTableWidget, row: int | None) -> None:
    """After a render: ``row`` (the one the view-model has selected) highlighted alone, or none,
    without the table's selection signals reaching the view-model."""
    was = table.blockSignals(True)
    table.clearSelection()
    if row is not None:
        table.selectRow(row)
    table.blockSignals(was)


def read_only_table(name: str, headers: list[str]) -> QTableWidget:
    """A table the user reads: named for tests and styles, its column headers, no row numbers,
    no editing, no grid."""
    table = QTableWidget(0, len(headers))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setShowGrid(False)
    return table
