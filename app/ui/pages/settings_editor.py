"""The Settings tab: an editor generated from the typed settings, with pydantic's messages inline.

Rows come from ``app.viewmodels.settings_form``: one per definition field and one per field of the
model's runtime settings (``LlamaCppSettings``, ``VllmSettings`` or ``MlxSettings``): the runtime's
default is the placeholder, the unit sits beside the box, the flag and description are the tooltip.
The rows are rebuilt when the model shown (or the Runtime picked) runs on another runtime. Save
stays disabled while any value is refused. An external endpoint shows its base URL, provider model
and API key file (a path) instead of a node, a file and runtime settings, and its runtime is fixed;
every model shows its fallbacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, Message
from app.ui.widgets import Card, StillComboBox, bind, button, label, line_edit, set_prop
from app.viewmodels.disk import RemovalPreview
from app.viewmodels.nodes import NO_NODES, node_choices
from app.viewmodels.settings_form import (
    FieldSpec,
    SettingsForm,
    all_fields,
    groups,
)
from daemon.api.contracts import profile
from daemon.api.models import ModelDefinition, ModelView


def _ask(parent: QWidget, text: str) -> bool:
    answer = QMessageBox.question(parent, "MirbadLLM", text)
    return answer == QMessageBox.StandardButton.Yes


class SettingsEditor(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.confirm: Callable[[QWidget, str], bool] = _ask  # tests answer for the user
        self.form: SettingsForm | None = None
        self.view: ModelView | None = None
        self.editors: dict[str, QWidget] = {}
        self.errors: dict[str, QLabel] = {}
        self.runtime: str | None = None  # the runtime the rows are built for
        self._loading = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 12, 12, 12)
        notice = QHBoxLayout()
        self.restart_note = label("Restart needed — the running process still uses the settings it started with.", wrap=True)
        self.restart_note.setProperty("badge", "restart")
        self.restart_note.setObjectName("RestartNeeded")
        self.restart_now = button("Restart now", icon="action-restart", on_click=self._restart)
        notice.addWidget(self.restart_note)
        notice.addWidget(self.restart_now)
        notice.addStretch(1)
        layout.addLayout(notice)
        bar = QHBoxLayout()
        self.summary = label("", role="error", name="FormSummary")
        self.summary.setWordWrap(True)
        bar.addWidget(self.summary, 1)
        self.duplicate_button = button("Duplicate")
        self.delete_button = button("Delete", kind="danger")
        self.delete_files_button = button("Delete + files", kind="danger", name="DeleteWithFiles")
        self.delete_files_button.setToolTip("Delete the model and its files no other model uses, in its node's "
                                            "models folder (asked first, with the space it frees)")
        self.revert_button = button("Revert")
        self.save_button = button("Save", kind="primary")
        for b in (self.duplicate_button, self.delete_button, self.delete_files_button, self.revert_button,
                  self.save_button):
            bar.addWidget(b)
        self.duplicate_button.clicked.connect(self._duplicate)
        self.delete_button.clicked.connect(self._delete)
        self.delete_files_button.clicked.connect(self._delete_with_files)
        self.revert_button.clicked.connect(self._revert)
        self.save_button.clicked.connect(self.save)
        layout.addLayout(bar)

        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget()
        self.column = QVBoxLayout(inner)
        self.column.setContentsMargins(0, 6, 10, 6)
        self.column.setSpacing(12)
        scroll.setWidget(inner)
        layout.addWidget(scroll, 1)
        self._build("llamacpp")
        bind(self, ctx.nodes.state, lambda _s: self._fill_nodes(self.form.values.get("node") if self.form else None))

    # --- construction ---------------------------------------------------------------------------
    def _build(self, runtime: str) -> None:
        while self.column.count():  # the rows of another runtime go
            item = self.column.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()
                widget.deleteLater()  # later: the Runtime picker may be the sender of this rebuild
        self.editors, self.errors = {}, {}
        self.runtime = runtime
        specs = all_fields(runtime)
        names = groups(runtime)
        cards = {g: Card(g) for g in names}
        grids = {}
        for group, card in cards.items():
            grid = QGridLayout()
            grid.setHorizontalSpacing(12)
            grid.setVerticalSpacing(4)
            grid.setColumnMinimumWidth(0, 150)
            grid.setColumnStretch(1, 1)
            grid.setColumnMinimumWidth(2, 50)
            card.body.addLayout(grid)
            grids[group] = grid
        for spec in specs:
            grid = grids[spec.group]
            row = grid.rowCount()
            title = label(spec.label)
            tip = " ".join(p for p in (spec.help, f"({spec.flag})" if spec.flag else "") if p)
            title.setToolTip(tip)
            editor = self._editor(spec)
            editor.setToolTip(tip)
            editor.setObjectName(f"edit-{spec.key}")
            self.editors[spec.key] = editor
            flag = label(spec.flag, muted=True)
            flag.setStyleSheet("font-size: 11px;")
            grid.addWidget(title, row, 0)
            grid.addWidget(editor, row, 1)
            if spec.flag:  # under its title: a column of its own made the form too wide for 1024 px
                grid.addWidget(flag, row + 1, 0)
            grid.addWidget(label(spec.unit, muted=True), row, 2)
            error = label("", role="field-error", wrap=True)
            error.setObjectName(f"error-{spec.key}")
            error.setVisible(False)
            self.errors[spec.key] = error
            grid.addWidget(error, row + 1, 1, 1, 2)
        for name in names:
            self.column.addWidget(cards[name])
        self.column.addStretch(1)

    def _editor(self, spec: FieldSpec) -> QWidget:
        if spec.key == "node":  # a picker of the paired nodes, each with its free memory
            picker = _narrow(StillComboBox())
            picker.currentIndexChanged.connect(lambda _i, c=picker: self._changed("node", c.currentData()))
            return picker
        if spec.kind == "bool":
            box = QCheckBox()
            box.toggled.connect(lambda on, k=spec.key: self._changed(k, on))
            return box
        if spec.kind in ("choice", "tribool"):
            combo = _narrow(StillComboBox())
            if spec.optional:
                combo.addItem(spec.placeholder or "runtime default", "")
            if spec.kind == "tribool":
                combo.addItem("on", "true")
                combo.addItem("off", "false")
            for n, choice in enumerate(spec.choices):
                combo.addItem(spec.choice_labels[n] if n < len(spec.choice_labels) else choice, choice)
            combo.currentIndexChanged.connect(lambda _i, k=spec.key, c=combo: self._changed(k, c.currentData()))
            return combo
        if spec.kind == "json":
            text = QPlainTextEdit()
            text.setFixedHeight(56)
            text.setPlaceholderText(spec.placeholder or "JSON")
            text.textChanged.connect(lambda k=spec.key, t=text: self._changed(k, t.toPlainText()))
            return text
        if spec.kind == "env":
            text = QPlainTextEdit()
            text.setFixedHeight(64)
            text.setPlaceholderText("NAME=value")
            text.textChanged.connect(lambda k=spec.key, t=text: self._changed(k, t.toPlainText()))
            return text
        edit = line_edit(spec.placeholder)
        edit.textChanged.connect(lambda value, k=spec.key: self._changed(k, value))
        return edit

    # --- state in -------------------------------------------------------------------------------
    def show_view(self, view: ModelView) -> None:
        same = self.view is not None and self.form is not None and not self.form.is_new \
            and self.view.definition.id == view.definition.id
        self.view = view
        self.restart_note.setVisible(view.status.restart_pending)
        self.restart_now.setVisible(view.status.restart_pending)
        if same and self.form is not None and (self.form.dirty or self.form.original == view.definition):
            return  # never throw away what the user is typing
        self._load(SettingsForm(view.definition))

    def show_draft(self, draft: ModelDefinition) -> None:
        if self.form is not None and self.form.is_new and self.form.original == draft:
            return
        self.view = None
        self.restart_note.setVisible(False)
        self.restart_now.setVisible(False)
        self._load(SettingsForm(draft, is_new=True))

    def _fill_nodes(self, current: str | None) -> None:
        picker = self.editors.get("node")
        if not isinstance(picker, QComboBox):
            return
        loading, self._loading = self._loading, True
        try:
            picker.clear()
            for node_id, text in node_choices(self.ctx.nodes.state.value.nodes, current):
                picker.addItem(text, node_id)
            index = picker.findData(current)
            placed = index < 0 and picker.count() > 0 and self.form is not None and self.form.is_new
            if placed and self.form is not None:
                index = 0  # a new model's default placement ("local") is on no node here: the first it has
                self.form.set("node", picker.itemData(0))
            picker.setPlaceholderText(NO_NODES if not picker.count() else f"{current}: no such node here — pick one")
            picker.setCurrentIndex(index)
        finally:
            self._loading = loading
        if placed and not loading:
            self._validate()

    def _load(self, form: SettingsForm) -> None:
        self.form = form
        if form.runtime != self.runtime:
            self._build(form.runtime)
        self._fill_nodes(form.values.get("node"))
        self._loading = True
        try:
            for key, editor in self.editors.items():
                value = form.values.get(key)
                if isinstance(editor, QCheckBox):
                    editor.setChecked(bool(value))
                elif key == "node":
                    continue  # placed by _fill_nodes: a node the daemon does not have is not shown as another
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(0, editor.findData(value or "")))
                elif isinstance(editor, QPlainTextEdit):
                    editor.setPlainText(str(value or ""))
                elif isinstance(editor, QLineEdit):
                    editor.setText(str(value or ""))
            self.editors["id"].setEnabled(form.is_new)
            self.editors["runtime"].setEnabled(profile(form.runtime).on_node)  # an endpoint is not moved onto a node
        finally:
            self._loading = False
        self.duplicate_button.setEnabled(not form.is_new)
        self.delete_button.setEnabled(not form.is_new)
        self.delete_files_button.setEnabled(not form.is_new and profile(form.runtime).on_node)  # an endpoint has none
        self._validate()

    # --- state out ------------------------------------------------------------------------------
    def _changed(self, key: str, value: Any) -> None:
        if self._loading or self.form is None:
            return
        self.form.set(key, value)
        if self.form.runtime != self.runtime:  # another runtime: its own rows, what was typed kept
            self._load(self.form)
            return
        self._validate()

    def _validate(self) -> ModelDefinition | None:
        if self.form is None:
            return None
        definition, errors = self.form.validate()
        for key, error in self.errors.items():
            message = errors.get(key, "")
            error.setText(message)
            error.setVisible(bool(message))
            set_prop(self.editors[key], "invalid", bool(message))
        stray = [f"{k}: {v}" for k, v in errors.items() if k not in self.errors]
        count = len(errors)
        self.summary.setText(" ".join(stray) or (f"{count} value{'s' if count > 1 else ''} to fix" if count else ""))
        self.save_button.setEnabled(definition is not None and self.form.dirty)
        self.revert_button.setEnabled(self.form.dirty and not self.form.is_new)
        return definition

    def save(self) -> None:
        definition = self._validate()
        if definition is None or self.form is None:
            return
        is_new = self.form.is_new

        async def run() -> None:
            view = await self.ctx.fleet.save_model(definition, is_new=is_new)
            self._load(SettingsForm(view.definition))
            self.ctx.models.saved(view.definition.id)

        self.ctx.act(run(), f"Saved {definition.served_name}")

    def _revert(self) -> None:
        if self.form is not None:
            self._load(SettingsForm(self.form.original, is_new=self.form.is_new))

    def _duplicate(self) -> None:
        if self.form is not None and not self.form.is_new:
            self.ctx.models.new_draft(self.form.original)

    def _delete(self) -> None:
        if self.form is None or self.form.is_new:
            return
        d = self.form.original
        if self.confirm(self, f"Delete “{d.served_name}”? It is stopped first; the model file stays on disk."):
            self.ctx.act(self.ctx.fleet.delete_model(d.id), f"Deleted {d.served_name}")

    def _delete_with_files(self) -> None:
        if self.form is None or self.form.is_new:
            return
        model_id = self.form.original.id

        async def preview() -> None:
            found = await self.ctx.disk.removal_preview(model_id)
            # Asked from Qt's own event, not inside this task: a modal question runs a loop of its own.
            QTimer.singleShot(0, lambda: self._confirm_removal(model_id, found))

        self.ctx.act(preview())

    def _confirm_removal(self, model_id: str, preview: RemovalPreview) -> None:
        if self.confirm(self, preview.question):
            async def remove() -> None:
                self.ctx.messages.emit(Message(await self.ctx.disk.remove_model_with_files(model_id)))

            self.ctx.act(remove())

    def _restart(self) -> None:
        if self.view is not None:
            self.ctx.act(self.ctx.fleet.restart_model(self.view.definition.id),
                         f"Restarting {self.view.definition.served_name}")


def _narrow(combo: StillComboBox) -> StillComboBox:
    """A choice as wide as its column, not as its longest item ("This machine — 36.6 GiB free · GPU
    …" made the form wider than the panel at 1024 px); the open list still shows items whole."""
    combo.setSizeAdjustPolicy(StillComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(10)
    return combo
