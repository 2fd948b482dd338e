"""One message of the Playground: Markdown prose, each fenced code block with a Copy button, the
model's reasoning folded under "Reasoning" (open it to read), attached images by name with a
thumbnail of each one whose bytes are at hand (attached now, or kept in a saved chat), the answer's
figures, and the actions that go with it (Edit on the user's messages, Regenerate on the last answer).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QGuiApplication, QPixmap
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.widgets import label
from app.viewmodels.chat_text import Segment, segments
from app.viewmodels.playground import ChatMessage

_LOGGER = logging.getLogger(__name__)
THUMBNAIL_PX = 96


def thumbnail(data_url: str) -> QPixmap | None:
    """An image data URL as a pixmap at most ``THUMBNAIL_PX`` on its longer side; None when it is not one."""
    try:
        data = base64.b64decode(data_url.split(",", 1)[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        return None
    pixmap = QPixmap()
    if not pixmap.loadFromData(data):
        return None
    if max(pixmap.width(), pixmap.height()) <= THUMBNAIL_PX:
        return pixmap
    return pixmap.scaled(THUMBNAIL_PX, THUMBNAIL_PX, Qt.AspectRatioMode.KeepAspectRatio,
                         Qt.TransformationMode.SmoothTransformation)


class CodeBlock(QFrame):
    """A fenced code block: its language, the code in a fixed-width font, and Copy."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("CodeBlock")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 8)
        layout.setSpacing(2)
        header = QHBoxLayout()
        self.language = label("", muted=True)
        self.copy = QToolButton()
        self.copy.setObjectName("CopyCode")
        self.copy.setText("Copy")
        self.copy.setToolTip("Copy this code to the clipboard")
        self.copy.clicked.connect(self.copy_code)
        header.addWidget(self.language)
        header.addStretch(1)
        header.addWidget(self.copy)
        layout.addLayout(header)
        self.code = QLabel()
        self.code.setObjectName("CodeText")
        self.code.setTextFormat(Qt.TextFormat.PlainText)
        self.code.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.code.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.code.setWordWrap(True)
        layout.addWidget(self.code)

    def show_segment(self, segment: Segment) -> None:
        self.language.setText(segment.language or "code")
        if self.code.text() != segment.text:
            self.code.setText(segment.text)
            self.copy.setText("Copy")

    def copy_code(self) -> None:
        QGuiApplication.clipboard().setText(self.code.text())
        self.copy.setText("Copied")


def _prose() -> QLabel:
    text = label("", wrap=True, name="BubbleText")
    text.setTextFormat(Qt.TextFormat.MarkdownText)
    text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                 | Qt.TextInteractionFlag.LinksAccessibleByMouse)
    text.setOpenExternalLinks(True)
    return text


class Bubble(QFrame):
    def __init__(self, message: ChatMessage, on_edit: Callable[[], None] | None = None,
                 on_regenerate: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.setObjectName("ChatUser" if message.role == "user" else "ChatAssistant")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.setSpacing(4)
        if message.completion:
            who = label("Prompt" if message.role == "user" else f"{message.model or 'The model'} continues", muted=True)
        else:
            who = label("You" if message.role == "user" else message.model or "Assistant", muted=True)
        layout.addWidget(who)
        self.reasoning_toggle = QToolButton()
        self.reasoning_toggle.setObjectName("ReasoningToggle")
        self.reasoning_toggle.setCheckable(True)
        self.reasoning_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.reasoning_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.reasoning_toggle.toggled.connect(self._fold)
        self.reasoning = label("", muted=True, wrap=True, selectable=True, name="ReasoningText")
        self.reasoning.setTextFormat(Qt.TextFormat.PlainText)
        self.reasoning.setVisible(False)
        layout.addWidget(self.reasoning_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.reasoning)
        self.images = label("", muted=True, wrap=True, name="BubbleImages")
        layout.addWidget(self.images)
        self.thumbnail_row = QHBoxLayout()
        self.thumbnail_row.setSpacing(6)
        layout.addLayout(self.thumbnail_row)
        self.thumbnails: list[QLabel] = []
        self.body = QVBoxLayout()
        self.body.setSpacing(6)
        layout.addLayout(self.body)
        self.text = _prose()  # the first prose part (the whole answer when it has no code)
        self.parts: list[QWidget] = []
        self.stats = label("", muted=True, name="BubbleStats")
        layout.addWidget(self.stats)
        actions = QHBoxLayout()
        actions.addStretch(1)
        self.edit_button = self._action("Edit", "EditMessage", on_edit, actions)
        self.regenerate_button = self._action("Regenerate", "Regenerate", on_regenerate, actions)
        layout.addLayout(actions)
        self.message: ChatMessage | None = None
        self.message_images: tuple[tuple[str, str], ...] = ()
        self.show_state(message)

    @staticmethod
    def _action(text: str, name: str, slot: Callable[[], None] | None, row: QHBoxLayout) -> QToolButton:
        action = QToolButton()
        action.setText(text)
        action.setObjectName(name)
        action.setVisible(False)
        if slot is not None:
            action.clicked.connect(lambda: slot())  # not the click's "checked" as an argument
            row.addWidget(action)
        return action

    def _fold(self, open_: bool) -> None:
        self.reasoning.setVisible(open_)
        self.reasoning_toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)

    def show_state(self, message: ChatMessage) -> None:
        if message == self.message:
            return
        self.message = message
        thinking = message.streaming and not message.content
        self.reasoning_toggle.setText("Thinking…" if thinking else "Reasoning")
        self.reasoning_toggle.setVisible(bool(message.reasoning))
        self.reasoning.setText(message.reasoning)
        names = ", ".join(image.name for image in message.images)
        self.images.setText(f"Attached: {names}" if names else "")
        self.images.setVisible(bool(names))
        self._show_thumbnails(message)
        self._show_body(message)
        if message.error:
            self.stats.setText(f"Error: {message.error}")
            self.stats.setProperty("role", "error")
        else:
            self.stats.setText(message.stats.describe() if message.stats else "")
        self.stats.setVisible(bool(self.stats.text()))

    def _show_thumbnails(self, message: ChatMessage) -> None:
        shown = self.message_images
        wanted = tuple((image.name, image.data_url) for image in message.images if image.data_url)
        if wanted == shown:
            return
        self.message_images = wanted
        while self.thumbnail_row.count():  # the old pictures and their stretch
            item = self.thumbnail_row.takeAt(0)
            if (old := item.widget()) is not None:
                old.deleteLater()
        self.thumbnails = []
        for name, url in wanted:
            pixmap = thumbnail(url)
            if pixmap is None:
                continue
            picture = QLabel()
            picture.setObjectName("BubbleThumbnail")
            picture.setPixmap(pixmap)
            picture.setToolTip(name)
            self.thumbnail_row.addWidget(picture)
            self.thumbnails.append(picture)
        if self.thumbnails:
            self.thumbnail_row.addStretch(1)

    def _show_body(self, message: ChatMessage) -> None:
        cursor = " ▍" if message.streaming else ""
        if message.role == "user" or message.completion:  # what the person typed, as typed
            parts = [Segment("text", message.content + cursor)]
        else:
            parts = segments(message.content) or [Segment("text", "")]
            if cursor and parts[-1].kind == "text":
                parts[-1] = Segment("text", parts[-1].text + cursor)
        plain = message.role == "user" or message.completion
        kinds = [p.kind for p in parts]
        if kinds != [("code" if isinstance(w, CodeBlock) else "text") for w in self.parts]:
            for old in self.parts:
                self.body.removeWidget(old)
                if old is self.text:
                    old.setVisible(False)  # kept: the first prose part is always this label
                else:
                    old.deleteLater()
            self.parts = []
            for part in parts:
                widget: QWidget = (CodeBlock() if part.kind == "code"
                                   else self.text if not any(w is self.text for w in self.parts) else _prose())
                self.parts.append(widget)
                self.body.addWidget(widget)
                widget.setVisible(True)
        for shown, part in zip(self.parts, parts, strict=True):
            if isinstance(shown, CodeBlock):
                shown.show_segment(part)
            elif isinstance(shown, QLabel):
                shown.setTextFormat(Qt.TextFormat.PlainText if plain else Qt.TextFormat.MarkdownText)
                shown.setText(part.text or ("…" if message.streaming else ""))

    def set_actions(self, *, can_edit: bool, can_regenerate: bool) -> None:
        self.edit_button.setVisible(can_edit)
        self.regenerate_button.setVisible(can_regenerate)
