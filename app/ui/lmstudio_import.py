"""The add-model wizard's LM Studio tab: the models of LM Studio's folders on the chosen node, a row
each (size, quant, its vision projector, the model it is already added as), ticked and imported at
once, registered where they lie. A folder of the same layout can be added to the look; a model
already added says so, and importing it again names that model instead of adding it twice."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.widgets import button, label, line_edit
from app.viewmodels.lmstudio_import import LmStudioImportState, LmStudioImportViewModel

_LOGGER = logging.getLogger(__name__)
PATH_ROLE = Qt.ItemDataRole.UserRole


class LmStudioPage(QWidget):
    def __init__(self, vm: LmStudioImportViewModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.vm = vm
        self._rendering = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        folder_row = QHBoxLayout()
        self.folder = line_edit("also look in: a models folder of LM Studio's layout (optional)", name="LmStudioFolder")
        self.folder.setToolTip("LM Studio's own folders (~/.lmstudio/models, ~/.cache/lm-studio/models) are always "
                               "looked in; add one you moved its models to.")
        self.folder.textEdited.connect(self.vm.set_folder)
        self.folder.returnPressed.connect(self._look)
        browse = button("Browse…", name="BrowseLmStudioFolder", on_click=self._browse)
        self.look_button = button("Look again", name="LmStudioLook", on_click=self._look)
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        folder_row.addWidget(self.look_button)
        layout.addLayout(folder_row)
        self.models = QListWidget()
        self.models.setObjectName("LmStudioModels")
        self.models.setMaximumHeight(160)
        self.models.setWordWrap(True)
        self.models.itemChanged.connect(self._ticked)
        layout.addWidget(self.models)
        self.empty = label("", muted=True, wrap=True, name="LmStudioEmpty")
        layout.addWidget(self.empty)
        row = QHBoxLayout()
        self.import_button = button("Import selected", kind="primary", name="LmStudioImport",
                                    on_click=lambda: asyncio.ensure_future(self.vm.import_selected()))
        self.status = label("", wrap=True, selectable=True, name="LmStudioStatus")
        row.addWidget(self.import_button)
        row.addWidget(self.status, 1)
        layout.addLayout(row)
        self.error = label("", role="error", wrap=True, name="LmStudioError")
        layout.addWidget(self.error)
        layout.addStretch(1)  # the rows and their Import stay together when the tab has room
        self._unsubscribe = self.vm.state.subscribe(self.show_state)
        self.show_state(self.vm.state.value)

    def show_state(self, s: LmStudioImportState) -> None:
        self._rendering = True
        try:
            shown = tuple((self.models.item(i).data(PATH_ROLE), self.models.item(i).text())
                          for i in range(self.models.count()))
            if shown != tuple(zip((m.path for m in s.listed), s.rows, strict=True)):
                self.models.clear()
                for m, text in zip(s.listed, s.rows, strict=True):
                    item = QListWidgetItem(text)
                    item.setData(PATH_ROLE, m.path)
                    item.setToolTip(m.path + (f"\nvision projector: {m.projector_path}" if m.projector_path else ""))
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    item.setCheckState(Qt.CheckState.Unchecked)  # the box shows from the start
                    self.models.addItem(item)
            for i in range(self.models.count()):
                item = self.models.item(i)
                wanted = Qt.CheckState.Checked if item.data(PATH_ROLE) in s.selected else Qt.CheckState.Unchecked
                if item.checkState() != wanted:
                    item.setCheckState(wanted)
        finally:
            self._rendering = False
        self.models.setVisible(bool(s.listed))
        self.empty.setText(s.empty_text)
        self.empty.setVisible(not s.listed and bool(s.empty_text))
        self.look_button.setEnabled(not s.loading)
        self.import_button.setEnabled(s.can_import)
        count = len(s.selected)
        self.import_button.setText(f"Import {count} selected" if count > 1 else "Import selected")
        self.status.setText(s.status_text)
        self.error.setText(s.error or "")
        self.error.setVisible(bool(s.error))

    def checked_paths(self) -> set[str]:
        return {self.models.item(i).data(PATH_ROLE) for i in range(self.models.count())
                if self.models.item(i).checkState() == Qt.CheckState.Checked}

    def _ticked(self, _item: QListWidgetItem) -> None:
        if not self._rendering:
            self.vm.set_selected(self.checked_paths())

    def _look(self) -> None:
        asyncio.ensure_future(self.vm.load())

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose a models folder of LM Studio's layout")
        if path:
            self.folder.setText(path)
            self.vm.set_folder(path)
            self._look()

    def close_page(self) -> None:
        self._unsubscribe()
