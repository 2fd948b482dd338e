"""The update badge on a Models page row: a newer revision on the hub ("Update available"), a hub answer
refused ("Update refused", with why), or the kept files of the last update ("Roll back…"); its menu
offers Update and Roll back (``app.viewmodels.model_updates``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu, QSizePolicy, QToolButton

from app.viewmodels.model_updates import badge_text, badge_tooltip
from daemon.api.model_updates import ModelUpdate

_LOGGER = logging.getLogger(__name__)


class UpdateBadge(QToolButton):
    def __init__(self, found: ModelUpdate, on_update: Callable[[str], object],
                 on_rollback: Callable[[str], object]) -> None:
        super().__init__()
        self.setObjectName("UpdateBadge")
        self.setProperty("badge", "update" if found.state != "refused" else "failed")
        self.setText(badge_text(found) or "")
        self.setToolTip(badge_tooltip(found))
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.menu_ = QMenu(self)
        if found.state == "available":
            update = self.menu_.addAction(f"Update to revision {(found.latest or '')[:12]}")
            update.setObjectName("UpdateModel")
            update.triggered.connect(lambda: on_update(found.model))
        if found.can_roll_back:
            back = self.menu_.addAction(f"Roll back to revision {(found.previous_revision or '?')[:12]}")
            back.setObjectName("RollBackModel")
            back.triggered.connect(lambda: on_rollback(found.model))
        if self.menu_.actions():
            self.setMenu(self.menu_)
            self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
