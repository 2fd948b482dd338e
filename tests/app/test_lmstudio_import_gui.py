"""The add-model wizard's LM Studio tab offscreen: LM Studio's models listed with size, quant and
projector, two ticked and imported, then one imported again is named, not added twice; a picked
folder adds its models to the list; a refusal is said on the tab."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from helpers import add_model_dialog
from memory_daemon.lmstudio import LMSTUDIO_HOME
from PySide6.QtCore import Qt

from app.ui.main_window import MainWindow
from daemon.api.client import DaemonError

pytestmark = pytest.mark.gui
QWEN = f"{LMSTUDIO_HOME}/lmstudio-community/Qwen3-4B-Instruct-2507-GGUF/Qwen3-4B-Instruct-2507-Q4_K_M.gguf"
GEMMA = f"{LMSTUDIO_HOME}/lmstudio-community/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf"


@pytest.fixture
def window(open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, FakeDaemonClient]:
    fake = FakeDaemonClient([definition("alpha")])
    return open_main_window(fake, size=(1280, 900)), fake


def _rows(dialog: Any) -> list[str]:
    models = dialog.lmstudio_page.models
    return [models.item(i).text() for i in range(models.count())]


def _tick(dialog: Any, path: str) -> None:
    models = dialog.lmstudio_page.models
    item = next(models.item(i) for i in range(models.count()) if models.item(i).data(Qt.ItemDataRole.UserRole) == path)
    item.setCheckState(Qt.CheckState.Checked)


def test_the_lm_studio_tab_imports_the_ticked_models_and_never_one_twice(
        window: tuple[MainWindow, FakeDaemonClient], qtbot: Any) -> None:
    win, fake = window
    with add_model_dialog(win.ctx, win) as dialog:
        page = dialog.lmstudio_page
        dialog.source_buttons.button(3).click()
        assert dialog.pages.currentIndex() == 3 and not dialog.add_button.isVisible()
        assert not dialog.model_id.isVisible() and not dialog.fit_button.isVisible()
        qtbot.waitUntil(lambda: len(_rows(dialog)) == 3)
        assert _rows(dialog)[1] == ("gemma-3-4b-it-Q4_K_M.gguf — Q4_K_M, 3.20 GiB, with vision projector  "
                                    "(lmstudio-community/gemma-3-4b-it-GGUF)")
        assert fake.called("lmstudio_models") == [("local", None)] and not page.import_button.isEnabled()

        _tick(dialog, QWEN)
        _tick(dialog, GEMMA)
        assert page.import_button.isEnabled() and page.import_button.text() == "Import 2 selected"
        qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.status.text().startswith("Added"))
        assert page.status.text() == "Added 'qwen3-4b-instruct-2507-q4-k-m', 'gemma-3-4b-it-q4-k-m'"
        gemma = fake.definitions["gemma-3-4b-it-q4-k-m"]
        assert gemma.model_path == GEMMA and gemma.extra_args[0] == "--mmproj" and gemma.tags == ["lmstudio"]
        qtbot.waitUntil(lambda: "— added as 'qwen3-4b-instruct-2507-q4-k-m'" in _rows(dialog)[0])
        assert not page.import_button.isEnabled()  # the ticks are cleared once imported

        _tick(dialog, QWEN)
        qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "already added" in page.status.text())
        assert page.status.text() == "already added as model 'qwen3-4b-instruct-2507-q4-k-m' (not added again)"
        assert [d.model_path for d in fake.definitions.values()].count(QWEN) == 1

        qtbot.keyClicks(page.folder, "/data/models")
        qtbot.mouseClick(page.look_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(_rows(dialog)) == 4)
        assert fake.called("lmstudio_models")[-1] == ("local", "/data/models")

        fake.fail_next["import_lmstudio"] = DaemonError(503, "node_offline", "node local is offline")
        _tick(dialog, GEMMA)
        qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.error.text() == "node local is offline")
        assert page.error.isVisible()
