"""The add-model wizard's LM Studio tab offscreen, over the real daemon whose local agent reads a
temporary LM Studio folder: its models listed with size, quant and projector, two ticked and imported,
then one imported again is named, not added twice; a picked folder adds its models to the list; a
refusal (a file gone since it was listed) is said on the tab."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import add_model_dialog
from PySide6.QtCore import Qt
from real_daemon import RealDaemon, daemon_on_a_machine

from app.ui.main_window import MainWindow
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition
from tests.fakes.gguf_files import write_gguf

pytestmark = pytest.mark.gui
GEMMA_SIZE = int(3.2 * 2**30)  # a sparse file: LM Studio's row shows its size, the agent reads its header only


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, Path]]:
    """The daemon and its machine's folder: LM Studio's models (Qwen; Gemma with its vision projector;
    Phi) under ``user/.lmstudio/models``, another model under ``picked``."""
    root = tmp_path_factory.mktemp("lmstudio-gui")
    lms = root / "user" / ".lmstudio" / "models"
    write_gguf(lms / "lmstudio-community" / "Qwen3-4B-Instruct-2507-GGUF" / "Qwen3-4B-Instruct-2507-Q4_K_M.gguf")
    gemma = write_gguf(lms / "lmstudio-community" / "gemma-3-4b-it-GGUF" / "gemma-3-4b-it-Q4_K_M.gguf")
    os.truncate(gemma, GEMMA_SIZE)
    write_gguf(gemma.parent / "mmproj-gemma-3-4b-it-F16.gguf", arch="clip", layers=1)
    write_gguf(lms / "bartowski" / "Phi-4-mini-instruct-GGUF" / "Phi-4-mini-instruct-Q6_K.gguf")
    write_gguf(root / "picked" / "unsloth" / "phi-4-GGUF" / "phi-4-Q5_K_M.gguf")
    with daemon_on_a_machine(root) as found:
        yield found, root


@pytest.fixture
def window(machine: tuple[RealDaemon, Path], open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*machine[0], client_name="app"), size=(1280, 900))


def _models(daemon: RealDaemon) -> list[ModelDefinition]:
    return daemon.call(lambda deps: deps.registry.all())


def _rows(dialog: Any) -> list[str]:
    models = dialog.lmstudio_page.models
    return [models.item(i).text() for i in range(models.count())]


def _row(dialog: Any, name: str) -> str:
    return next(r for r in _rows(dialog) if r.startswith(name))


def _tick(dialog: Any, path: Path) -> None:
    models = dialog.lmstudio_page.models
    item = next(models.item(i) for i in range(models.count())
                if models.item(i).data(Qt.ItemDataRole.UserRole) == str(path))
    item.setCheckState(Qt.CheckState.Checked)


def test_the_lm_studio_tab_imports_the_ticked_models_and_never_one_twice(
        window: MainWindow, machine: tuple[RealDaemon, Path], qtbot: Any) -> None:
    daemon, root = machine
    lms = root / "user" / ".lmstudio" / "models"
    qwen = lms / "lmstudio-community" / "Qwen3-4B-Instruct-2507-GGUF" / "Qwen3-4B-Instruct-2507-Q4_K_M.gguf"
    gemma = lms / "lmstudio-community" / "gemma-3-4b-it-GGUF" / "gemma-3-4b-it-Q4_K_M.gguf"
    phi = lms / "bartowski" / "Phi-4-mini-instruct-GGUF" / "Phi-4-mini-instruct-Q6_K.gguf"
    with add_model_dialog(window.ctx, window) as dialog:
        page = dialog.lmstudio_page
        dialog.source_buttons.button(3).click()
        assert dialog.pages.currentIndex() == 3 and not dialog.add_button.isVisible()
        assert not dialog.model_id.isVisible() and not dialog.fit_button.isVisible()
        qtbot.waitUntil(lambda: len(_rows(dialog)) == 3, timeout=30_000)
        assert _row(dialog, "gemma") == ("gemma-3-4b-it-Q4_K_M.gguf — Q4_K_M, 3.20 GiB, with vision projector  "
                                         "(lmstudio-community/gemma-3-4b-it-GGUF)")
        assert not page.import_button.isEnabled()

        _tick(dialog, qwen)
        _tick(dialog, gemma)
        assert page.import_button.isEnabled() and page.import_button.text() == "Import 2 selected"
        qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.status.text().startswith("Added"), timeout=30_000)
        assert page.status.text() == "Added 'qwen3-4b-instruct-2507-q4-k-m', 'gemma-3-4b-it-q4-k-m'"
        added = next(d for d in _models(daemon) if d.id == "gemma-3-4b-it-q4-k-m")
        assert added.model_path == str(gemma) and added.tags == ["lmstudio"]
        assert added.extra_args == ["--mmproj", str(gemma.parent / "mmproj-gemma-3-4b-it-F16.gguf")]
        qtbot.waitUntil(lambda: "— added as 'qwen3-4b-instruct-2507-q4-k-m'" in _row(dialog, "Qwen3"), timeout=30_000)
        assert not page.import_button.isEnabled()  # the ticks are cleared once imported

        _tick(dialog, qwen)
        qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "already added" in page.status.text(), timeout=30_000)
        assert page.status.text() == "already added as model 'qwen3-4b-instruct-2507-q4-k-m' (not added again)"
        assert [d.model_path for d in _models(daemon)].count(str(qwen)) == 1

        qtbot.waitUntil(lambda: page.look_button.isEnabled(), timeout=30_000)  # the list asked again once done
        qtbot.keyClicks(page.folder, str(root / "picked"))
        qtbot.mouseClick(page.look_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(_rows(dialog)) == 4, timeout=30_000)
        assert _row(dialog, "phi-4-Q5_K_M.gguf").endswith("(unsloth/phi-4-GGUF)")

        phi.unlink()  # gone from LM Studio's folder since it was listed: the node refuses it
        _tick(dialog, phi)
        qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.error.text() != "", timeout=30_000)
        assert page.error.text() == f"{phi} is not a model in LM Studio's folders on this node"
        assert page.error.isVisible()
        assert not [d for d in _models(daemon) if d.model_path == str(phi)]
