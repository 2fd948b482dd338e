"""Models: the list (with state badges, an update badge for a model with a newer revision on the hub, and
a tag filter) and the panel of the selected model."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.format import busy_text
from app.ui.pages.first_run import FirstRunCard
from app.ui.pages.model_panel import ModelPanel, RuntimeBadge
from app.ui.pages.model_update_badge import UpdateBadge
from app.ui.widgets import StateBadge, button, combo_box, filled_page, label
from app.viewmodels.model_updates import badge_text
from app.viewmodels.models_page import ModelsPageState
from daemon.api.model_updates import ModelUpdate
from daemon.api.models import ModelView
from daemon.api.vision import sees_images


class ModelRow(QWidget):
    def __init__(self, view: ModelView, connected: bool = True, update: ModelUpdate | None = None,
                 on_update: Callable[[str], object] = lambda _id: None,
                 on_rollback: Callable[[str], object] = lambda _id: None) -> None:
        super().__init__()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        text = QVBoxLayout()
        text.setSpacing(1)
        name = label(view.definition.served_name)
        name.setStyleSheet("font-weight: 600;")
        tags = " · ".join(view.definition.tags) or view.status.node_name or view.definition.node
        sees = " · sees images" if sees_images(view.definition) else ""  # a vision projector (mmproj)
        detail = label(f"{view.definition.id} · {tags}{sees}", muted=True, name="ModelDetail")
        for text_label in (name, detail):  # long names are clipped, never the badge
            text_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            text.addWidget(text_label)
        layout.addLayout(text, 1)
        badges = QVBoxLayout()  # stacked, so the runtime's badge costs the narrow list no width
        badges.setSpacing(2)
        self.badge = StateBadge(view.status.state if connected else None)  # stale: never a green "Ready"
        if connected and view.status.busy:  # a job holds it: "Tuning", not "Stopped"
            self.badge.set_state(view.status.state, busy_text(view.status.busy))
        self.runtime_badge = RuntimeBadge(view.definition)
        self.update_badge = UpdateBadge(update, on_update, on_rollback) \
            if update is not None and badge_text(update) else None  # a newer revision on the hub, or kept files
        for badge in (self.badge, self.runtime_badge, self.update_badge):
            if badge is not None:
                badges.addWidget(badge, 0, Qt.AlignmentFlag.AlignRight)
        layout.addLayout(badges)


class ModelsPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        layout = filled_page(self, "Models", "Each model is one runtime process; start, tune and watch it here.")
        self.first_run = FirstRunCard(ctx)  # the empty state's offer, shown only while there is no model
        layout.addWidget(self.first_run)

        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 8, 0)
        # One obvious way in: "Add a model" opens the wizard (a file on a node, Hugging Face, Ollama,
        # LM Studio); the raw settings form is the "advanced" path beside it. The tag filter gets a
        # row of its own, so neither is squeezed at 1024 px.
        bar = QHBoxLayout()
        self.open_wizard: Callable[[], None] = lambda: None  # the main window opens the add-model wizard
        self.get_button = button("Add a model", kind="primary", icon="action-add", color="#FFFFFF", name="GetModel")
        self.get_button.setToolTip("A GGUF file on a node, a download from Hugging Face, or a model from Ollama "
                                   "or LM Studio")
        self.get_button.clicked.connect(lambda: self.open_wizard())
        self.add_button = button("Advanced…", kind="flat", name="AddAdvanced")
        self.add_button.setToolTip("Write a model's definition by hand: runtime, path and every setting")
        self.add_button.clicked.connect(lambda: ctx.models.new_draft())
        bar.addWidget(self.get_button, 1)
        bar.addWidget(self.add_button)
        left_layout.addLayout(bar)
        self.tag_filter = combo_box("TagFilter")
        self.tag_filter.currentIndexChanged.connect(self._tag_chosen)
        left_layout.addWidget(self.tag_filter)
        self.list = QListWidget()
        self.list.setObjectName("ModelList")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.currentItemChanged.connect(self._item_chosen)
        left_layout.addWidget(self.list, 1)
        self.empty = label("No models yet. Add one to get started.", muted=True, wrap=True)
        left_layout.addWidget(self.empty)
        split.addWidget(left)
        self.panel = ModelPanel(ctx)
        split.addWidget(self.panel)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([250, 900])  # at 1024 px the panel keeps its Start, Stop and Restart whole
        left.setMinimumWidth(250)  # "Add a model" and "Advanced…" read whole
        layout.addWidget(split, 1)
        self._rendering = False
        ctx.models.state.subscribe(self.show_state, now=True)

    def show_state(self, state: ModelsPageState) -> None:
        self._rendering = True
        try:
            tags = ("",) + state.tags
            if tuple(self.tag_filter.itemData(i) for i in range(self.tag_filter.count())) != tags:
                self.tag_filter.clear()
                for tag in tags:
                    self.tag_filter.addItem(f"Tag: {tag}" if tag else "All tags", tag)
            self.tag_filter.setCurrentIndex(tags.index(state.tag))
            self.list.clear()
            for view in state.models:
                item = QListWidgetItem()
                item.setData(Qt.ItemDataRole.UserRole, view.definition.id)
                row = ModelRow(view, state.connected, state.updates.get(view.definition.id),
                               self._update, self._rollback)
                item.setSizeHint(QSize(0, row.sizeHint().height() + 1))  # + the border under each item
                self.list.addItem(item)
                self.list.setItemWidget(item, row)
                if view.definition.id == state.selected_id:
                    self.list.setCurrentItem(item)
            self.empty.setVisible(not state.models)
        finally:
            self._rendering = False
        if state.draft is not None:
            self.panel.show_draft(state.draft)
        else:
            self.panel.show_model(state.selected)

    def _update(self, model_id: str) -> None:
        self.ctx.act(self.ctx.models.updates.update(model_id),
                     done=f"Updating {model_id}: the new revision downloads beside the old files")

    def _rollback(self, model_id: str) -> None:
        self.ctx.act(self.ctx.models.updates.rollback(model_id), done=f"{model_id} is back on its kept files")

    def _tag_chosen(self, index: int) -> None:
        if not self._rendering and index >= 0:
            self.ctx.models.set_tag(self.tag_filter.itemData(index) or "")

    def _item_chosen(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if not self._rendering and item is not None:
            self.ctx.models.select(item.data(Qt.ItemDataRole.UserRole))

    def select(self, model_id: str) -> None:
        self.ctx.models.set_tag("")
        self.ctx.models.select(model_id)
