"""Playground: chat with a ready model, streamed token by token, with TTFT and tok/s under each answer.

For a base model (no chat template) it offers text completion instead, and says why above the form.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.ui.widgets import (
    Card,
    StillComboBox,
    StillDoubleSpinBox,
    StillSpinBox,
    button,
    label,
    page,
    page_header,
)
from app.viewmodels.playground import CHAT, COMPLETION, ChatMessage, PlaygroundState


class Bubble(QFrame):
    def __init__(self, message: ChatMessage) -> None:
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
        self.text = label("", wrap=True, selectable=True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setObjectName("BubbleText")
        layout.addWidget(self.text)
        self.stats = label("", muted=True)
        self.stats.setObjectName("BubbleStats")
        layout.addWidget(self.stats)
        self.message: ChatMessage | None = None
        self.show_state(message)

    def show_state(self, message: ChatMessage) -> None:
        if message == self.message:
            return
        self.message = message
        text = message.content + (" ▍" if message.streaming else "")
        self.text.setText(text or ("…" if message.streaming else ""))
        if message.error:
            self.stats.setText(f"Error: {message.error}")
            self.stats.setProperty("role", "error")
        else:
            self.stats.setText(message.stats.describe() if message.stats else "")
        self.stats.setVisible(bool(self.stats.text()))


class PlaygroundPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.vm = ctx.playground
        body, layout = page(self)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(body)
        layout.addWidget(page_header("Playground", "Talk to any ready model through the same /v1 your tools use."))
        row = QHBoxLayout()
        row.setSpacing(14)
        layout.addLayout(row, 1)

        side = Card("Request")
        side.setFixedWidth(300)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        self.model = StillComboBox()
        self.model.setObjectName("PlaygroundModel")
        self.model.currentTextChanged.connect(lambda t: t and self.vm.configure(model=t))
        self.mode = StillComboBox()
        self.mode.setObjectName("PlaygroundMode")
        self.mode.addItem("Chat", CHAT)
        self.mode.addItem("Text completion", COMPLETION)
        self.mode.setToolTip("Chat sends /v1/chat/completions; text completion sends the raw prompt to "
                             "/v1/completions, for base models that only continue text.")
        self.mode.currentIndexChanged.connect(lambda i: self.vm.configure(mode=self.mode.itemData(i)))
        self.temperature = StillDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.valueChanged.connect(lambda v: self.vm.configure(temperature=round(v, 2)))
        self.max_tokens = StillSpinBox()
        self.max_tokens.setRange(1, 131072)
        self.max_tokens.valueChanged.connect(lambda v: self.vm.configure(max_tokens=v))
        self.api_key = QLineEdit()
        self.api_key.setObjectName("PlaygroundKey")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("sk-…")
        self.api_key.textChanged.connect(lambda v: self.vm.configure(api_key=v))
        self.api_key_label = QLabel("API key")
        form.addRow("Model", self.model)
        form.addRow("Mode", self.mode)
        form.addRow("Temperature", self.temperature)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow(self.api_key_label, self.api_key)
        self.mode_reason = label("", wrap=True)
        self.mode_reason.setObjectName("PlaygroundModeReason")
        side.body.addWidget(self.mode_reason)
        side.body.addLayout(form)
        self.system_label = label("System prompt", muted=True)
        side.body.addWidget(self.system_label)
        self.system = QPlainTextEdit()
        self.system.setObjectName("SystemPrompt")
        self.system.textChanged.connect(lambda: self.vm.configure(system_prompt=self.system.toPlainText()))
        side.body.addWidget(self.system, 1)
        self.clear_button = button("Clear conversation")
        self.clear_button.clicked.connect(self.vm.clear)
        side.body.addWidget(self.clear_button)
        self.no_model = label("No model is ready. Start one from Models or the tray.", role="error", wrap=True)
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
        compose = QHBoxLayout()
        self.input = QPlainTextEdit()
        self.input.setObjectName("PlaygroundInput")
        self.input.setPlaceholderText("Ask something…  (Ctrl+Enter sends)")
        self.input.setFixedHeight(76)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):  # the text box itself takes a plain Enter
            QShortcut(QKeySequence(keys), self.input).activated.connect(self.send)
        self.send_button = button("Send", kind="primary")
        self.send_button.setObjectName("SendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = button("Stop", icon="action-stop")
        self.stop_button.setObjectName("StopButton")
        self.stop_button.clicked.connect(self.vm.stop)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        compose.addWidget(self.input, 1)
        compose.addLayout(buttons)
        chat.addLayout(compose)
        row.addLayout(chat, 1)
        self.bubbles: list[Bubble] = []
        self.vm.state.subscribe(self.show_state, now=True)

    def send(self) -> None:
        if self.vm.send(self.input.toPlainText()) is not None:
            self.input.clear()

    def show_state(self, s: PlaygroundState) -> None:
        if tuple(self.model.itemText(i) for i in range(self.model.count())) != s.models:
            self.model.blockSignals(True)
            self.model.clear()
            self.model.addItems(list(s.models))
            self.model.blockSignals(False)
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
        self.send_button.setText("Continue" if completion else "Send")
        self.api_key.setVisible(s.keys_required)
        self.api_key_label.setVisible(s.keys_required)
        self.no_model.setVisible(not s.models)
        self.send_button.setEnabled(bool(s.model) and not s.busy)
        self.stop_button.setEnabled(s.busy)
        self._render_messages(s.messages)

    def _render_messages(self, messages: tuple[ChatMessage, ...]) -> None:
        while len(self.bubbles) > len(messages):
            self.bubbles.pop().deleteLater()
        grew = len(messages) > len(self.bubbles)
        for i, message in enumerate(messages):
            if i < len(self.bubbles):
                self.bubbles[i].show_state(message)
            else:
                bubble = Bubble(message)
                self.bubbles.append(bubble)
                self.messages.insertWidget(self.messages.count() - 1, bubble)
        if grew or (messages and messages[-1].streaming):
            bar = self.chat_scroll.verticalScrollBar()
            bar.setValue(bar.maximum())
