"""Playground: chat with any model a request can start, streamed token by token, with TTFT and tok/s
under each answer (``app.ui.pages.chat_bubble`` draws a message: Markdown, code with Copy, reasoning folded).

For a base model (no chat template) it offers text completion instead, and says why above the form.
On the left, the saved chats (kept by the daemon): open one, rename, delete, export as Markdown or
JSON. Images attach to a message for a model that can see (marked "sees images" in the model list);
for one that cannot, the page says why and sends nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from functools import partial
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.ui.pages.chat_bubble import Bubble
from app.ui.widgets import (
    Card,
    StillDoubleSpinBox,
    StillSpinBox,
    button,
    combo_box,
    filled_page,
    label,
    line_edit,
)
from app.viewmodels.playground import CHAT, COMPLETION, ChatMessage, PlaygroundState
from daemon.api.client import DaemonError
from daemon.api.conversations import ConversationSummary

_LOGGER = logging.getLogger(__name__)
VISION_TIP = "Sees images (its GGUF comes with a vision projector)"


class PlaygroundPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.vm = ctx.playground
        layout = filled_page(self, "Playground", "Talk to any model through the same /v1 your tools use.")
        row = QHBoxLayout()
        row.setSpacing(14)
        layout.addLayout(row, 1)
        row.addWidget(self._chats_card())

        side = Card("Request")
        side.setFixedWidth(300)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        self.model = combo_box("PlaygroundModel")
        self.model.currentTextChanged.connect(lambda t: t and self.vm.configure(model=t))
        self.mode = combo_box("PlaygroundMode", [("Chat", CHAT), ("Text completion", COMPLETION)],
                              tooltip="Chat sends /v1/chat/completions; text completion sends the raw prompt "
                                      "to /v1/completions, for base models that only continue text.")
        self.mode.currentIndexChanged.connect(lambda i: self.vm.configure(mode=self.mode.itemData(i)))
        self.temperature = StillDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.valueChanged.connect(lambda v: self.vm.configure(temperature=round(v, 2)))
        self.max_tokens = StillSpinBox()
        self.max_tokens.setRange(1, 131072)
        self.max_tokens.valueChanged.connect(lambda v: self.vm.configure(max_tokens=v))
        self.api_key = line_edit("sk-…", name="PlaygroundKey", password=True)
        self.api_key.textChanged.connect(lambda v: self.vm.configure(api_key=v))
        self.api_key_label = QLabel("API key")
        form.addRow("Model", self.model)
        form.addRow("Mode", self.mode)
        form.addRow("Temperature", self.temperature)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow(self.api_key_label, self.api_key)
        self.mode_reason = label("", wrap=True, name="PlaygroundModeReason")
        side.body.addWidget(self.mode_reason)
        side.body.addLayout(form)
        self.system_label = label("System prompt", muted=True)
        side.body.addWidget(self.system_label)
        self.system = QPlainTextEdit()
        self.system.setObjectName("SystemPrompt")
        self.system.textChanged.connect(lambda: self.vm.configure(system_prompt=self.system.toPlainText()))
        side.body.addWidget(self.system, 1)
        self.no_model = label("No model can answer: add one from Discover or Models.", role="error", wrap=True)
        side.body.addWidget(self.no_model)
        row.addWidget(side)

        chat = QVBoxLayout()
        self.chat_scroll = QScrollArea()
        self.chat_scroll.setWidgetResizable(True)
        self.transcript = QWidget()
        self.transcript.setObjectName("Transcript")
        self.messages = QVBoxLayout(self.transcript)
        self.messages.setSpacing(10)
        self.messages.addStretch(1)
        self.chat_scroll.setWidget(self.transcript)
        chat.addWidget(self.chat_scroll, 1)
        self.notice = label("", role="error", wrap=True, name="PlaygroundNotice")
        chat.addWidget(self.notice)
        attached = QHBoxLayout()
        self.attached = label("", muted=True, name="AttachedImages")
        self.remove_images = button("Remove images", on_click=self.vm.remove_images)
        self.editing_label = label("", muted=True)
        self.cancel_edit = button("Cancel edit", on_click=lambda: self.end_edit(clear=True))
        for widget in (self.attached, self.remove_images, self.editing_label, self.cancel_edit):
            attached.addWidget(widget)
        attached.addStretch(1)
        chat.addLayout(attached)
        compose = QHBoxLayout()
        self.input = QPlainTextEdit()
        self.input.setObjectName("PlaygroundInput")
        self.input.setPlaceholderText("Ask something…  (Ctrl+Enter sends)")
        self.input.setFixedHeight(76)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):  # the text box itself takes a plain Enter
            QShortcut(QKeySequence(keys), self.input).activated.connect(self.send)
        self.send_button = button("Send", kind="primary", name="SendButton", on_click=self.send)
        self.stop_button = button("Stop", icon="action-stop", name="StopButton", on_click=self.vm.stop)
        self.attach_button = button("Image…", name="AttachImage")
        self.attach_button.setToolTip("Attach an image to the next message (for a model that can see)")
        self.attach_button.clicked.connect(lambda: self.attach_images())
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.attach_button)
        compose.addWidget(self.input, 1)
        compose.addLayout(buttons)
        chat.addLayout(compose)
        row.addLayout(chat, 1)
        self.bubbles: list[Bubble] = []
        self.editing: int | None = None  # the user's message being edited in the box below
        self.vm.state.subscribe(self.show_state, now=True)

    def _chats_card(self) -> Card:
        card = Card("Chats")
        card.setFixedWidth(220)
        self.new_chat = button("New chat", kind="primary", name="NewChat", on_click=self._new_chat)
        card.body.addWidget(self.new_chat)
        self.chat_list = QListWidget()
        self.chat_list.setObjectName("ChatList")
        self.chat_list.itemClicked.connect(self._open_chat)
        card.body.addWidget(self.chat_list, 1)
        actions = QGridLayout()  # two rows: the card is narrow
        self.rename_chat = button("Rename", on_click=lambda: self.rename_selected())
        self.delete_chat = button("Delete", on_click=lambda: self.delete_selected())
        self.export_chat = button("Export…", on_click=lambda: self.export_selected())
        actions.addWidget(self.rename_chat, 0, 0)
        actions.addWidget(self.delete_chat, 0, 1)
        actions.addWidget(self.export_chat, 1, 0, 1, 2)
        card.body.addLayout(actions)
        return card

    def showEvent(self, event: object) -> None:
        super().showEvent(event)  # type: ignore[arg-type]
        self._spawn(self.vm.refresh_conversations())

    def _spawn(self, work: Awaitable[object]) -> None:
        async def run() -> None:
            try:
                await work
            except DaemonError as exc:
                self.notice.setText(exc.message)
                self.notice.setVisible(True)
        asyncio.ensure_future(run())

    def _regenerate(self) -> None:
        self.vm.regenerate()

    def _open_chat(self, item: QListWidgetItem) -> None:
        self.end_edit(clear=True)
        self._spawn(self.vm.open_conversation(str(item.data(Qt.ItemDataRole.UserRole))))

    def _new_chat(self) -> None:
        self.end_edit(clear=True)
        self.vm.new_chat()

    def selected_chat(self) -> str | None:
        """The chat selected in the list, else the one shown."""
        item = self.chat_list.currentItem()
        return str(item.data(Qt.ItemDataRole.UserRole)) if item is not None else self.vm.state.value.conversation_id

    def rename_selected(self, title: str | None = None) -> None:
        chat_id = self.selected_chat()
        if chat_id is None:
            return
        if title is None:
            current = next((c.title for c in self.vm.state.value.conversations if c.id == chat_id), "")
            title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=current)
            if not ok or not title.strip():
                return
        self._spawn(self.vm.rename_conversation(chat_id, title))

    def delete_selected(self, confirmed: bool = False) -> None:
        chat_id = self.selected_chat()
        if chat_id is None:
            return
        if not confirmed and QMessageBox.question(
                self, "Delete chat", "Delete this chat? It cannot be brought back.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                QMessageBox.StandardButton.Cancel) != QMessageBox.StandardButton.Yes:
            return
        self._spawn(self.vm.delete_conversation(chat_id))

    def export_selected(self, path: Path | None = None) -> None:
        """Write the chat to ``path`` (asked for when None): Markdown, or JSON for a .json name."""
        chat_id = self.selected_chat()
        if chat_id is None:
            return
        if path is None:
            name, _ = QFileDialog.getSaveFileName(self, "Export chat", "chat.md", "Markdown (*.md);;JSON (*.json)")
            if not name:
                return
            path = Path(name)
        target = path

        async def export() -> None:
            text = await self.vm.export_conversation(chat_id, "json" if target.suffix == ".json" else "md")
            await asyncio.get_running_loop().run_in_executor(None, target.write_text, text, "utf-8")
        self._spawn(export())

    def attach_images(self, paths: list[Path] | None = None) -> None:
        if paths is None:
            names, _ = QFileDialog.getOpenFileNames(self, "Attach images", "",
                                                    "Images (*.png *.jpg *.jpeg *.webp *.gif *.bmp)")
            paths = [Path(n) for n in names]
        for path in paths:
            if not self.vm.attach_image(path):
                break

    def begin_edit(self, index: int) -> None:
        """Put the user's message ``index`` in the box; sending it replaces it and what followed."""
        self.editing = index
        self.input.setPlainText(self.vm.state.value.messages[index].content)
        self.input.setFocus()
        self.show_state(self.vm.state.value)

    def end_edit(self, clear: bool = False) -> None:
        if self.editing is not None and clear:
            self.input.clear()
        self.editing = None
        self.show_state(self.vm.state.value)

    def send(self) -> None:
        text = self.input.toPlainText()
        if self.editing is not None:
            sent = self.vm.edit(self.editing, text)
        else:
            sent = self.vm.send(text)
        if sent is not None:
            self.input.clear()
            self.end_edit()

    def show_state(self, s: PlaygroundState) -> None:
        if tuple(self.model.itemText(i) for i in range(self.model.count())) != s.models:
            self.model.blockSignals(True)
            self.model.clear()
            self.model.addItems(list(s.models))
            self.model.blockSignals(False)
        for i, name in enumerate(s.models):
            self.model.setItemData(i, VISION_TIP if name in s.vision_models else None, Qt.ItemDataRole.ToolTipRole)
            self.model.setItemData(i, "👁" if name in s.vision_models else None, Qt.ItemDataRole.AccessibleDescriptionRole)
        if s.model and self.model.currentText() != s.model:
            self.model.setCurrentText(s.model)
        for widget, value in ((self.temperature, s.temperature), (self.max_tokens, s.max_tokens)):
            if widget.value() != value:
                widget.blockSignals(True)
                widget.setValue(value)
                widget.blockSignals(False)
        if self.system.toPlainText() != s.system_prompt:
            self.system.blockSignals(True)
            self.system.setPlainText(s.system_prompt)
            self.system.blockSignals(False)
        index = self.mode.findData(s.mode)
        if self.mode.currentIndex() != index:
            self.mode.blockSignals(True)
            self.mode.setCurrentIndex(index)
            self.mode.blockSignals(False)
        self.mode_reason.setText(s.mode_reason)
        self.mode_reason.setVisible(bool(s.mode_reason))
        completion = s.mode == COMPLETION
        self.system.setEnabled(not completion)  # a raw prompt has no system message
        self.system_label.setText("System prompt (chat only)" if completion else "System prompt")
        self.input.setPlaceholderText("Write the start of a text; the model continues it…  (Ctrl+Enter sends)"
                                      if completion else "Ask something…  (Ctrl+Enter sends)")
        self.send_button.setText("Continue" if completion else "Resend" if self.editing is not None else "Send")
        self.editing_label.setText("Editing a message: sending replaces it and what followed")
        self.editing_label.setVisible(self.editing is not None)
        self.cancel_edit.setVisible(self.editing is not None)
        self.notice.setText(s.notice or s.save_error)
        self.notice.setVisible(bool(s.notice or s.save_error))
        names = ", ".join(image.name for image in s.images)
        self.attached.setText(f"Attached: {names}" if names else "")
        self.attached.setVisible(bool(names))
        self.remove_images.setVisible(bool(names))
        self.attach_button.setEnabled(not completion)
        self.attach_button.setToolTip(VISION_TIP if s.model in s.vision_models else
                                      "Attach an image to the next message (for a model that can see)")
        self._show_chats(s.conversations, s.conversation_id)
        self.api_key.setVisible(s.keys_required)
        self.api_key_label.setVisible(s.keys_required)
        self.no_model.setVisible(not s.models)
        self.send_button.setEnabled(bool(s.model) and not s.busy)
        self.stop_button.setEnabled(s.busy)
        self._render_messages(s.messages)

    def _show_chats(self, chats: tuple[ConversationSummary, ...], shown: str | None) -> None:
        wanted = [(c.id, c.title) for c in chats]
        have = [(self.chat_list.item(i).data(Qt.ItemDataRole.UserRole), self.chat_list.item(i).text())
                for i in range(self.chat_list.count())]
        if wanted != have:
            self.chat_list.blockSignals(True)
            self.chat_list.clear()
            for chat in chats:
                item = QListWidgetItem(chat.title)
                item.setData(Qt.ItemDataRole.UserRole, chat.id)
                item.setToolTip(f"{chat.model or 'no model'} · {chat.message_count} messages")
                self.chat_list.addItem(item)
            self.chat_list.blockSignals(False)
        for i in range(self.chat_list.count()):
            item = self.chat_list.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == shown and not item.isSelected():
                self.chat_list.setCurrentItem(item)
        for widget in (self.rename_chat, self.delete_chat, self.export_chat):
            widget.setEnabled(bool(chats))

    def _render_messages(self, messages: tuple[ChatMessage, ...]) -> None:
        while len(self.bubbles) > len(messages):
            self.bubbles.pop().deleteLater()
        grew = len(messages) > len(self.bubbles)
        for i, message in enumerate(messages):
            shown = self.bubbles[i].message if i < len(self.bubbles) else None
            if shown is not None and shown.role == message.role:
                self.bubbles[i].show_state(message)
            else:
                bubble = Bubble(message, on_edit=partial(self.begin_edit, i), on_regenerate=self._regenerate)
                if i < len(self.bubbles):
                    self.messages.replaceWidget(self.bubbles[i], bubble)
                    self.bubbles[i].deleteLater()
                    self.bubbles[i] = bubble
                else:
                    self.bubbles.append(bubble)
                    self.messages.insertWidget(self.messages.count() - 1, bubble)
        busy = self.vm.state.value.busy
        for i, bubble in enumerate(self.bubbles):
            message = messages[i]
            bubble.set_actions(can_edit=message.role == "user" and not busy and not message.completion,
                               can_regenerate=message.role == "assistant" and i == len(messages) - 1 and not busy)
        if grew or (messages and messages[-1].streaming):
            bar = self.chat_scroll.verticalScrollBar()
            bar.setValue(bar.maximum())
