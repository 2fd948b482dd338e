"""The "Add your first model" card, shown on the Overview and in the Models page's empty state.

Thin: it renders ``FirstRunState`` and hands clicks to ``FirstRunViewModel`` (``ctx.first_run``);
both pages' cards share that one view-model, so a download started on one shows on the other.
"""

from __future__ import annotations

from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QProgressBar, QVBoxLayout

from app import format as fmt
from app.context import AppContext
from app.ui.widgets import Card, button, label
from app.viewmodels.first_run import FirstRunState


class FirstRunCard(Card):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__("Add your first model", attention=True)
        self.setObjectName("FirstRunCard")
        self.ctx = ctx
        vm = ctx.first_run
        demo = QHBoxLayout()
        text = QVBoxLayout()
        self.demo_title = label(vm.state.value.demo_title)
        self.demo_title.setStyleSheet("font-weight: 600;")
        text.addWidget(self.demo_title)
        text.addWidget(label(vm.state.value.demo_text, muted=True, wrap=True))
        demo.addLayout(text, 1)
        self.demo_button = button("Get the demo model", kind="primary", name="GetDemoModel",
                                  on_click=lambda: ctx.act(vm.get_demo()))
        demo.addWidget(self.demo_button)
        self.cancel_button = button("Cancel", kind="flat", name="CancelDemoModel",
                                    on_click=lambda: ctx.act(vm.cancel_demo()))
        demo.addWidget(self.cancel_button)
        self.body.addLayout(demo)
        self.progress = QProgressBar()
        self.progress.setObjectName("DemoProgress")
        self.progress.setRange(0, 1000)
        self.body.addWidget(self.progress)
        self.progress_text = label("", muted=True, wrap=True, name="DemoProgressText")
        self.body.addWidget(self.progress_text)

        self.found_title = label("Use a model you already have")
        self.found_title.setStyleSheet("font-weight: 600;")
        self.body.addWidget(self.found_title)
        self.found_rows = QGridLayout()
        self.found_rows.setHorizontalSpacing(18)
        self.body.addLayout(self.found_rows)
        self.found_note = label("", muted=True, wrap=True)
        self.body.addWidget(self.found_note)
        self.error = label("", role="error", wrap=True, selectable=True, name="FirstRunError")
        self.body.addWidget(self.error)
        self._found_keys: tuple[tuple[str, bool], ...] | None = None
        vm.state.subscribe(self.show_state, now=True)

    def show_state(self, s: FirstRunState) -> None:
        self.setVisible(s.offered)
        self.demo_button.setEnabled(s.can_get_demo)
        self.cancel_button.setVisible(s.downloading)
        self.progress.setVisible(s.demo_transfer is not None)
        if s.progress is None:
            self.progress.setRange(0, 0 if s.downloading else 1000)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(s.progress * 1000))
        self.progress_text.setText(s.progress_text)
        self.progress_text.setVisible(bool(s.progress_text))
        if s.scanning:
            self.found_note.setText("Looking for models from Ollama and LM Studio on this machine…")
        elif s.scanned and not s.found:
            self.found_note.setText("No Ollama or LM Studio models on this machine. Or use Add a model on the "
                                    "Models page for any GGUF from Hugging Face or a file.")
        else:
            self.found_note.setText("")
        self.found_note.setVisible(bool(self.found_note.text()))
        self._render_found(s)
        self.error.setText(s.error or "")
        self.error.setVisible(bool(s.error))

    def _render_found(self, s: FirstRunState) -> None:
        keys = tuple((m.key, m.key in s.adding) for m in s.found)
        if keys == self._found_keys:
            return
        self._found_keys = keys
        while self.found_rows.count():
            child = self.found_rows.takeAt(0)
            widget = child.widget() if child is not None else None
            if widget is not None:
                widget.deleteLater()
        for row, model in enumerate(s.found):
            self.found_rows.addWidget(label(model.name, selectable=True), row, 0)
            self.found_rows.addWidget(label(model.source_text, muted=True), row, 1)
            self.found_rows.addWidget(label(fmt.size(model.size) if model.size else "—", muted=True), row, 2)
            adding = model.key in s.adding
            add = button("Adding…" if adding else "Add", kind="flat")
            add.setObjectName(f"AddFound-{row}")
            add.setEnabled(not adding)
            add.clicked.connect(lambda _=False, key=model.key: self.ctx.act(self.ctx.first_run.add_found(key)))
            self.found_rows.addWidget(add, row, 3)
        self.found_rows.setColumnStretch(0, 1)
