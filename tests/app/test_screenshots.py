"""``make screenshots`` covers every page of the main window and every dialog, light and dark.

A new page or dialog without a screenshot fails here, so the docs cannot quietly fall behind.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import app.ui
from app import screenshots

ROOT = Path(__file__).resolve().parents[2]


def _dialog_classes() -> set[str]:
    from PySide6.QtWidgets import QDialog

    found: set[str] = set()
    for module_info in pkgutil.walk_packages(app.ui.__path__, "app.ui."):
        module = importlib.import_module(module_info.name)
        found |= {name for name, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, QDialog) and cls.__module__ == module.__name__}
    return found


def test_every_navigation_page_has_a_screenshot() -> None:
    from app.ui.main_window import PAGES

    missing = [key for key, _title in PAGES if key not in screenshots.PAGE_SHOTS]
    assert not missing, f"pages without a screenshot in app/screenshots.py PAGE_SHOTS: {missing}"


def test_every_model_tab_has_a_screenshot() -> None:
    from app.ui.pages import model_panel

    tabs = [name for name in ("OVERVIEW", "SETTINGS", "LOGS", "CHARTS", "BENCHMARKS") if hasattr(model_panel, name)]
    shots = [s for s in screenshots.PAGE_SHOTS if s.startswith("models")]
    assert len(shots) == len(tabs), f"model tabs {tabs} vs screenshots {shots}"


def test_every_dialog_class_has_a_screenshot() -> None:
    dialogs = _dialog_classes()
    assert {"PairDialog", "TuningWizard", "AddModelDialog", "NewKeyDialog"} <= dialogs  # the scan sees them
    missing = sorted(dialogs - set(screenshots.DIALOG_SHOTS))
    assert not missing, f"dialogs without a screenshot in app/screenshots.py DIALOG_SHOTS: {missing}"


@pytest.mark.gui
@pytest.mark.slow
def test_the_screenshots_run_writes_every_listed_picture(tmp_path: Path) -> None:
    # Every page still settles (loop and Qt run between grabs), for a tenth of the docs' time.
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MIRBADLLM_SCREENSHOT_SETTLE": "0.1"}
    done = subprocess.run([sys.executable, "-m", "app.screenshots", str(tmp_path)], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    names = (*screenshots.PAGE_SHOTS, *screenshots.DIALOG_SHOTS.values(), *screenshots.EXTRA_SHOTS)
    expected = {f"{mode}-{name}.png" for mode in ("light", "dark") for name in names}
    written = {p.name for p in tmp_path.glob("*.png")}
    assert expected <= written, f"not written: {sorted(expected - written)}"
    small = [p.name for p in tmp_path.glob("*.png") if p.stat().st_size < 4000]
    assert not small, f"empty-looking screenshots: {small}"
    from PySide6.QtGui import QImage

    image = QImage(str(tmp_path / "light-overview.png"))
    assert (image.width(), image.height()) == (1280, 800)
