"""The add-model wizard: a local file, a Hugging Face file, an Ollama model or LM Studio's models
(``app.ui.lmstudio_import``: several ticked and imported at once), with "will it fit"
before anything is downloaded and the transfer's progress until the model is registered. The
chosen node's runtimes are shown as badges, and the runtime is picked among the ones it offers.
For vLLM and MLX a model folder can be chosen as well as a file; vLLM asks for its container image
(the node's by default); MLX has no context size to ask for.

"How it runs here" lists the daemon's plan for a GGUF file on the node, or on Hugging Face before
it is downloaded (only its header is read, by each node): every node's options, each with the
context that fits, free now or needs room, and the flags; the picked one gives the saved (or
downloaded) model its node and GPU settings (across nodes: the main node and its helper nodes, each
one's layers in the row, the helpers named under the list). A plan that fails says why, and Add still works. An external
endpoint asks for its base URL, the provider's model name and the path of an API key file (a path on
the daemon's machine, never the key itself); it has no node, runtime or context."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QRadioButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, Message
from app.ui.lmstudio_import import LmStudioPage
from app.ui.pages.nodes import RuntimeBadges
from app.ui.widgets import Card, StillComboBox, button, label, line_edit, set_prop
from app.viewmodels.add_model import AddModelState, AddModelViewModel, SourceKind
from app.viewmodels.lmstudio_import import LmStudioImportViewModel
from daemon.api.contracts import profile

# What the context field's placeholder says, by the setting that caps the runtime's context.
CONTEXT_PLACEHOLDERS = {"ctx_size": "the model's own (tokens, all slots)",
                        "max_model_len": "vLLM's max model length (tokens; default: the model's)"}
SOURCES: tuple[tuple[SourceKind, str], ...] = (("hf", "Hugging Face"), ("file", "A file on the node"),
                                               ("ollama", "An Ollama model"), ("lmstudio", "LM Studio"),
                                               ("external", "An external endpoint"))


class AddModelDialog(QDialog):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.vm = AddModelViewModel(ctx.client, ctx.fleet.events)
        self.lmstudio_vm = LmStudioImportViewModel(ctx.client, ctx.fleet.events)
        self.setWindowTitle("Add a model")
        self.setMinimumSize(640, 520)
        self._rendering = False
        self._announced: tuple[str, ...] = ()
        # The fields scroll when there is more to say (an error, a plan) than room: never squeezed to
        # slivers; the buttons stay put at the bottom, never moving under the pointer.
        outer = QVBoxLayout(self)
        scroll = QScrollArea()
        scroll.setObjectName("AddModelScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget()
        scroll.setWidget(body)
        outer.addWidget(scroll, 1)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(10)
        title = label("Add a model", role="figure")
        title.setStyleSheet("font-size: 18px;")
        layout.addWidget(title)
        layout.addLayout(self._source_row())
        self.pages = QStackedWidget()
        for kind, _text in SOURCES:
            self.pages.addWidget({"hf": self._hf_page, "file": self._file_page, "ollama": self._ollama_page,
                                  "lmstudio": self._lmstudio_page, "external": self._external_page}[kind]())
        layout.addWidget(self.pages)
        layout.addWidget(self._common_card())
        self.progress_card = self._progress_card()
        layout.addWidget(self.progress_card, 1)
        self.error = label("", role="error", wrap=True, name="AddModelError")
        layout.addWidget(self.error)
        outer.addLayout(self._buttons())
        self._unsubscribe = self.vm.state.subscribe(self.show_state)
        self.show_state(self.vm.state.value)
        self._nodes = asyncio.ensure_future(self.vm.load_nodes())

    # --- building ------------------------------------------------------------------------------
    def _field(self, name: str, placeholder: str, object_name: str) -> QLineEdit:
        edit = line_edit(placeholder, name=object_name)
        edit.textEdited.connect(lambda text, n=name: self.vm.set_field(n, text))
        return edit

    def _source_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.source_buttons = QButtonGroup(self)
        for n, (kind, text) in enumerate(SOURCES):
            radio = QRadioButton(text)
            radio.setObjectName(f"Source-{kind}")
            self.source_buttons.addButton(radio, n)
            row.addWidget(radio)
        row.addStretch(1)
        self.source_buttons.idClicked.connect(lambda n: self.vm.set_source(SOURCES[n][0]))
        return row

    def _hf_page(self) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.hf_repo = self._field("hf_repo", "bartowski/Llama-3.2-3B-Instruct-GGUF", "HfRepo")
        self.hf_file = self._field("hf_file", "Q4_K_M, or a file name such as *Q4_K_M.gguf", "HfFile")
        form.addRow("Repository", self.hf_repo)
        form.addRow("Quant or file", self.hf_file)
        return page

    def _file_page(self) -> QWidget:
        page = QWidget()
        row = QHBoxLayout(page)
        self.path = self._field("path", "/path/to/model.gguf (on the node)", "ModelPath")
        browse = button("Browse…", name="BrowseModel", on_click=self._browse)
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        return page

    def _external_page(self) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.base_url = self._field("base_url", "https://api.openai.com/v1", "BaseUrl")
        self.provider_model = self._field("provider_model", "the model name the server knows, e.g. gpt-4o-mini",
                                          "ProviderModel")
        key_row = QHBoxLayout()
        self.api_key_file = self._field("api_key_file", "/path/to/key.txt on the daemon's machine (optional)",
                                        "ApiKeyFile")
        self.api_key_file.setToolTip("A path, never the key: the daemon reads the key from this file on each "
                                     "request; it is not stored, shown or logged.")
        browse = button("Browse…", name="BrowseKeyFile", on_click=self._browse_key)
        key_row.addWidget(self.api_key_file, 1)
        key_row.addWidget(browse)
        form.addRow("Base URL", self.base_url)
        form.addRow("Provider model", self.provider_model)
        form.addRow("API key file", key_row)
        self.external_note = label("", muted=True, wrap=True, name="ExternalNote")
        form.addRow("", self.external_note)
        return page

    def _ollama_page(self) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        store_row = QHBoxLayout()
        self.ollama_store = self._field("ollama_store", "default: ~/.ollama/models on the node", "OllamaStore")
        self.list_button = button("List models", on_click=lambda: asyncio.ensure_future(self.vm.load_ollama_models()))
        store_row.addWidget(self.ollama_store, 1)
        store_row.addWidget(self.list_button)
        form.addRow("Ollama folder", store_row)
        self.ollama_model = StillComboBox()
        self.ollama_model.setObjectName("OllamaModel")
        self.ollama_model.setEditable(True)
        self.ollama_model.currentTextChanged.connect(self._ollama_chosen)
        form.addRow("Model", self.ollama_model)
        return page

    def _lmstudio_page(self) -> QWidget:
        self.lmstudio_page = LmStudioPage(self.lmstudio_vm)
        return self.lmstudio_page

    def _follow_lmstudio(self, s: AddModelState) -> None:
        """The LM Studio tab looks on the chosen node, once it is shown (again after the node changes)."""
        node = s.chosen_node
        typed = s.node.strip() or "local"
        self.lmstudio_vm.set_node(typed if node is None else "local" if node.local else node.id)
        if s.source == "lmstudio" and (node is not None or typed == "local"):  # not on each key of a name typed
            self.lmstudio_vm.look_once()

    def _common_card(self) -> QWidget:
        card = Card("Model")
        form = QFormLayout()
        self.node = self._field("node", "local", "Node")
        self.model_id = self._field("model_id", "made from the file name", "ModelId")
        self.ctx_size = self._field("ctx_size", "the model's own (tokens, all slots)", "CtxSize")
        form.addRow("Node", self.node)
        self.node_runtimes = RuntimeBadges()
        form.addRow("Its runtimes", self.node_runtimes)
        self.runtime = StillComboBox()
        self.runtime.setObjectName("Runtime")
        self.runtime.activated.connect(lambda _i: self._runtime_chosen())
        form.addRow("Runtime", self.runtime)
        self.runtime_note = label("", muted=True, wrap=True, name="RuntimeNote")
        form.addRow("", self.runtime_note)
        self.image = self._field("image", "the node's vLLM image", "Image")
        form.addRow("Image", self.image)
        form.addRow("Model id", self.model_id)
        form.addRow("Context size", self.ctx_size)
        self.form = form
        card.body.addLayout(form)
        row = QHBoxLayout()
        self.fit_button = button("Will it fit?", name="CheckFit",
                                 on_click=lambda: asyncio.ensure_future(self.vm.check_fit()))
        row.addWidget(self.fit_button)
        self.plan_button = button("How it runs here", name="CheckPlan")
        self.plan_button.setToolTip("Every node's ways to run this file: GPU, split, offload or CPU, the context "
                                    "that fits, and whether it fits now or needs room.")
        self.plan_button.clicked.connect(lambda: asyncio.ensure_future(self.vm.check_plan()))
        row.addWidget(self.plan_button)
        row.addStretch(1)
        card.body.addLayout(row)
        self.fit_text = label("", wrap=True, selectable=True, name="FitText")
        card.body.addWidget(self.fit_text)
        self.plan_list = QListWidget()
        self.plan_list.setObjectName("PlanOptions")
        self.plan_list.setWordWrap(True)
        self.plan_list.setMaximumHeight(120)
        self.plan_list.currentRowChanged.connect(self._option_chosen)
        card.body.addWidget(self.plan_list)
        self.plan_note = label("", muted=True, wrap=True, name="PlanNote")
        card.body.addWidget(self.plan_note)
        return card

    def _progress_card(self) -> QWidget:
        card = Card("Progress")
        self.progress = QProgressBar()
        self.progress.setObjectName("TransferProgress")
        self.progress.setRange(0, 1000)
        self.progress_text = label("", muted=True, wrap=True, name="TransferText")
        card.body.addWidget(self.progress)
        card.body.addWidget(self.progress_text)
        goes_on = label("Closing this window does not stop it: the Downloads page follows it, with pause and resume.",
                        muted=True, wrap=True)
        goes_on.setObjectName("TransferGoesOn")
        card.body.addWidget(goes_on)
        card.body.addStretch(1)
        return card

    def _buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.cancel_button = button("Cancel download", name="CancelTransfer",
                                    on_click=lambda: asyncio.ensure_future(self.vm.cancel()))
        close = button("Close", on_click=self.accept)
        self.add_button = button("Add", kind="primary", name="AddModel", on_click=self._add)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        row.addWidget(close)
        row.addWidget(self.add_button)
        return row

    # --- state ---------------------------------------------------------------------------------
    def show_state(self, s: AddModelState) -> None:
        self._rendering = True
        try:
            index = [kind for kind, _t in SOURCES].index(s.source)
            self.source_buttons.button(index).setChecked(True)
            self.pages.setCurrentIndex(index)
            names = tuple(m.model for m in s.ollama_models)
            if tuple(self.ollama_model.itemText(i) for i in range(self.ollama_model.count())) != names:
                self.ollama_model.clear()
                self.ollama_model.addItems(list(names))
            if s.ollama_model and self.ollama_model.currentText() != s.ollama_model:
                self.ollama_model.setCurrentText(s.ollama_model)
            choices = s.runtime_choices
            if tuple((self.runtime.itemData(i), self.runtime.itemText(i))
                     for i in range(self.runtime.count())) != choices:
                self.runtime.clear()
                for runtime, text in choices:
                    self.runtime.addItem(text, runtime)
            self.runtime.setCurrentIndex(self.runtime.findData(s.runtime))
            rows = s.plan_rows
            if tuple(self.plan_list.item(i).text() for i in range(self.plan_list.count())) != rows:
                self.plan_list.clear()
                for n, text in enumerate(rows):
                    item = QListWidgetItem(text)
                    if not s.pickable(n):
                        item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsSelectable & ~Qt.ItemFlag.ItemIsEnabled)
                    self.plan_list.addItem(item)
            self.plan_list.setCurrentRow(-1 if s.picked is None else s.picked)
            if not self.node.text() and s.node.strip() not in ("", "local"):  # the daemon has no local agent
                self.node.setText(s.node)
            picked_node = s.chosen_node if s.picked is not None else None
            if picked_node is not None:  # the option picked says where it runs: the Node field shows it
                shown = "local" if picked_node.local else picked_node.name
                if self.node.text() != shown:
                    self.node.setText(shown)
        finally:
            self._rendering = False
        node = s.chosen_node
        if node is not None:
            self.node_runtimes.show_node(node)
        self.form.setRowVisible(self.node_runtimes, node is not None and not s.external)
        self.runtime.setEnabled(len(s.runtime_choices) > 1)
        for row in (self.node, self.runtime):
            self.form.setRowVisible(row, not s.external)
        lmstudio = s.source == "lmstudio"  # its own list and Import: no fit, id or context to ask
        self.fit_button.setVisible(not s.external and not lmstudio)
        for row in (self.model_id, self.ctx_size):
            self.form.setRowVisible(row, not lmstudio)
        self.add_button.setVisible(not lmstudio)
        self.progress_card.setVisible(not lmstudio)  # the tab says its import's outcome itself
        self._follow_lmstudio(s)
        self.model_id.setPlaceholderText("made from the provider model" if s.external else "made from the file name")
        self.plan_button.setVisible(s.source in ("file", "hf"))
        self.plan_button.setEnabled(s.can_plan)
        self.plan_button.setText("Asking the nodes…" if s.planning else "How it runs here")
        self.plan_list.setVisible(bool(s.plan_options))
        self.plan_note.setText(s.plan_note)
        set_prop(self.plan_note, "role", "error" if s.plan_error else "")
        self.plan_note.setVisible(bool(s.plan_note))
        self.external_note.setText(s.external_problem if s.external and (s.base_url or s.provider_model)
                                   else "The key stays in its file on the daemon's machine: read on each request, "
                                        "never stored, shown or logged.")
        self.form.setRowVisible(self.image, s.asks_image)
        self.image.setPlaceholderText(s.image_default or "vllm/vllm-openai:<version> (the node offers none)")
        self.form.setRowVisible(self.ctx_size, s.asks_context and not s.external and not lmstudio)
        self.ctx_size.setPlaceholderText(CONTEXT_PLACEHOLDERS.get(profile(s.runtime).context_setting or "", ""))
        self.path.setPlaceholderText("/path/to/model-folder or a .gguf file (on the node)" if s.takes_folder
                                     else "/path/to/model.gguf (on the node)")
        self.runtime_note.setText(s.runtime_note)
        self.form.setRowVisible(self.runtime_note, bool(s.runtime_note) and not s.external)
        self.fit_button.setEnabled(s.can_check and not s.checking)
        self.fit_button.setText("Checking…" if s.checking else "Will it fit?")
        self.fit_text.setText(s.fit_text or ("Reads only the file's header: nothing is downloaded."
                                             if s.source == "hf" else ""))
        self.add_button.setEnabled(s.can_add)
        self.add_button.setText("Download and add" if s.source == "hf" else "Import and add"
                                if s.source == "ollama" else "Add")
        self.add_button.setToolTip(s.external_problem if s.external else "")
        self.cancel_button.setVisible(s.running)
        progress = s.progress
        self.progress.setVisible(s.transfer is not None)
        self.progress.setRange(0, 0 if progress is None and s.running else 1000)
        self.progress.setValue(int((progress or (1.0 if s.done_ids else 0.0)) * 1000))
        self.progress_text.setText(s.progress_text)
        self.error.setText(s.error or "")
        self.error.setVisible(bool(s.error))
        if s.done_ids and s.done_ids != self._announced:
            self._announced = s.done_ids
            self.ctx.messages.emit(Message(f"Added {', '.join(s.done_ids)}"))

    def _ollama_chosen(self, text: str) -> None:
        if not self._rendering:
            self.vm.set_field("ollama_model", text)

    def _option_chosen(self, row: int) -> None:
        if not self._rendering and row >= 0 and self.vm.state.value.pickable(row):
            self.vm.pick_option(row)

    def _browse_key(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(self, "Choose the file holding the API key")
        if path:
            self.api_key_file.setText(path)
            self.vm.set_field("api_key_file", path)

    def _runtime_chosen(self) -> None:
        runtime = self.runtime.currentData()
        if not self._rendering and runtime:
            self.vm.set_runtime(runtime)

    def _browse(self) -> None:
        if self.vm.state.value.takes_folder:  # a Hugging Face snapshot folder: config.json and the weights
            path = QFileDialog.getExistingDirectory(self, "Choose the model's folder")
        else:
            path, _filter = QFileDialog.getOpenFileName(self, "Choose a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.path.setText(path)
            self.vm.set_field("path", path)

    def _add(self) -> None:
        asyncio.ensure_future(self.vm.add())

    def done(self, result: int) -> None:
        self._nodes.cancel()
        self._unsubscribe()
        self.vm.close()
        self.lmstudio_page.close_page()
        self.lmstudio_vm.close()
        super().done(result)
