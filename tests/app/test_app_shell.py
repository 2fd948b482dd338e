"""The app's shell: one instance per user, the start-up failure dialog, icons and themes, arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QLabel, QPlainTextEdit, QWidget

from app.bootstrap import BootstrapError
from app.main import parse_args
from app.single_instance import SingleInstance, server_name
from app.ui import theme
from app.ui.dialogs import DaemonFailedDialog
from app.ui.icons import export_pngs, tray_icon
from app.viewmodels.fleet import FleetState

pytestmark = pytest.mark.gui


def test_a_second_launch_raises_the_first_and_leaves(qapp: QApplication, qtbot: Any, tmp_path: Path) -> None:
    first = SingleInstance(tmp_path)
    assert not first.ask_existing_to_raise(50), "nobody is running yet"
    assert first.listen()
    second = SingleInstance(tmp_path)
    with qtbot.waitSignal(first.activated, timeout=3000):
        assert second.ask_existing_to_raise()
    other_home = SingleInstance(tmp_path / "elsewhere")
    assert not other_home.ask_existing_to_raise(50), "another data directory is another app"
    first.close()
    assert server_name(tmp_path) != server_name(tmp_path / "elsewhere")


def test_daemon_failure_dialog_shows_the_log_and_what_to_do(qapp: QApplication) -> None:
    error = BootstrapError("The daemon exited with code 1 while starting.", "See ~/.mirbadllm/logs/daemon-launch.log.",
                           "Traceback (most recent call last):\nOSError: [Errno 98] address already in use")
    dialog = DaemonFailedDialog(error)
    log = dialog.findChild(QPlainTextEdit, "DaemonLog")
    assert log is not None and "address already in use" in log.toPlainText()
    assert dialog.retry.text() == "Try again"
    dialog.copy.click()
    assert "exited with code 1" in qapp.clipboard().text()


def test_every_fleet_state_has_a_tray_icon_and_pngs_export(qapp: QApplication, tmp_path: Path) -> None:
    for state in FleetState:
        assert not tray_icon(state).pixmap(22, 22).isNull(), state
    written = export_pngs(tmp_path, sizes=(16, 64))
    assert len(written) == 2 * (1 + len(FleetState)) and all(p.stat().st_size > 0 for p in written)


def test_both_themes_fill_every_colour_token(qapp: QApplication) -> None:
    for name in ("light", "dark"):
        qss = theme.style_sheet(name)
        assert "@" not in qss.replace("@media", ""), f"unfilled token in the {name} style sheet"
    assert theme.colors("light").keys() == theme.colors("dark").keys()


def test_command_line_options() -> None:
    args = parse_args(["--home", "/tmp/h", "--no-daemon-start", "--minimized"])
    assert (args.home, args.no_daemon_start, args.minimized, args.demo) == (Path("/tmp/h"), True, True, False)


def test_the_qtcharts_fallback_draws_too(qapp: QApplication, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("PySide6.QtCharts")
    from app.ui import charts

    monkeypatch.setattr(charts, "BACKEND", "qtcharts")
    chart = charts.LiveChart("Process memory", "bytes", ["Resident"])
    chart.set_data([1000.0, 1001.0, 1002.0], [[2.0**30, float("nan"), 2.0**31]])
    assert chart.points == 3 and not chart.grab().isNull()


def test_a_chart_of_counts_never_shows_a_negative_axis(qapp: QApplication) -> None:
    from app.ui import charts

    if charts.BACKEND != "pyqtgraph":
        pytest.skip("the QtCharts fallback sets its own 0-based range (test above)")
    chart = charts.LiveChart("Requests", "", ["Requests"])
    chart.set_data([1000.0, 1001.0, 1002.0], [[0.0, 0.0, 0.0]])  # nothing happened: a flat line at 0
    chart.resize(400, 200)
    chart.show()
    view = chart._plot.getPlotItem().getViewBox()
    view.updateAutoRange()  # what the next paint does
    qapp.processEvents()
    low, high = chart._plot.getPlotItem().getViewBox().viewRange()[1]
    assert low >= 0 and high > 0, (low, high)


def test_a_gauge_with_a_long_gpu_name_never_widens_the_page(qapp: QApplication) -> None:
    from app.ui.widgets import Gauge

    name = "GPU 0 memory · NVIDIA GeForce RTX 4090 Laptop GPU with a very long marketing name"
    gauge = Gauge(name)
    gauge.set_value(0.5, "15.2 GiB of 24.0 GiB")
    assert gauge.minimumSizeHint().width() < 300, "the name gives way; the figure stays whole"
    assert gauge.title.toolTip() == name


class QBalloonTip(QWidget):  # named as Qt's own tray balloon, which paints a light yellow bubble
    pass


@pytest.mark.parametrize("name", ["light", "dark"])
def test_the_tray_balloon_text_stays_dark_on_its_light_bubble(qapp: QApplication, name: str) -> None:
    """Qt's fallback tray balloon forces a light yellow background; the theme's light text on it
    (dark theme) was unreadable."""
    theme.apply(qapp, name)
    try:
        balloon = QBalloonTip()
        text = QLabel("Model ready", balloon)
        text.ensurePolished()
        assert text.palette().color(QPalette.ColorRole.WindowText).lightness() < 60
        plain = QLabel("elsewhere")
        plain.ensurePolished()
        assert plain.palette().color(QPalette.ColorRole.WindowText).name() == theme.colors(name)["text"].lower()
    finally:
        theme.apply(qapp, "light")
