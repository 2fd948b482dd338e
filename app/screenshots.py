"""Screenshots of every page, light and dark, at 1280×800: ``python -m app.screenshots [OUT]``.

Runs offscreen against the in-memory ``DemoDaemon`` and writes PNGs to ``docs/screenshots/`` (or
OUT), for the docs and for a person to check what the app looks like (``make screenshots``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

SIZE = (1280, 800)
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


async def _settle(seconds: float = 0.25) -> None:
    from PySide6.QtWidgets import QApplication

    await asyncio.sleep(seconds)
    QApplication.processEvents()


def _demo_conversation(ctx) -> None:  # type: ignore[no-untyped-def]
    from app.viewmodels.playground import AnswerStats, ChatMessage

    vm = ctx.playground
    model = vm.state.value.model
    messages = (
        ChatMessage("user", "In two sentences: why run models locally?"),
        ChatMessage("assistant", "Your prompts and data never leave your machines, and there is no per-token bill "
                    "or rate limit. With one OpenAI-compatible endpoint, every tool you already use just works.",
                    model, AnswerStats(182.0, 41, 88.6, "stop")),
        ChatMessage("user", "And the catch?"),
        ChatMessage("assistant", "You provide the hardware: big models want a lot of memory, so pick sizes that fit",
                    model, streaming=True),
    )
    vm.state.set(replace(vm.state.value, messages=messages, busy=True))


async def shoot(app, out: Path, modes: tuple[str, ...] = ("light", "dark")) -> list[Path]:  # type: ignore[no-untyped-def]
    from app.context import AppContext
    from app.demo import DemoDaemon
    from app.ui import theme
    from app.ui.dialogs import NewKeyDialog
    from app.ui.main_window import MainWindow
    from app.ui.pages.model_panel import CHARTS, LOGS, OVERVIEW, SETTINGS
    from app.ui.tray import TrayController

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    prefs = Path(tempfile.mkdtemp()) / "app.json"
    for mode in modes:
        theme.apply(app, mode)
        demo = DemoDaemon()
        ctx = AppContext.create(demo, Path("~/.local/share/mirbadllm"), prefs_path=prefs, platform="linux")
        await ctx.fleet.resync()
        await ctx.access.refresh()
        window = MainWindow(ctx, apply_theme=lambda m: theme.apply(app, m))
        window.resize(*SIZE)
        window.show()

        def save(name: str, widget, mode: str = mode) -> None:  # type: ignore[no-untyped-def]
            path = out / f"{mode}-{name}.png"
            widget.grab().save(str(path))
            written.append(path)

        shots = [("overview", None), ("models", OVERVIEW), ("models-settings", SETTINGS), ("models-logs", LOGS),
                 ("models-charts", CHARTS), ("playground", None), ("access", None), ("settings", None)]
        for name, tab in shots:
            window.show_page(name.split("-")[0])
            if tab is not None:
                window.models.select("qwen25-coder-7b" if tab != OVERVIEW else "llama31-8b")
                window.models.panel.tabs.setCurrentIndex(tab)
            if name == "playground":
                _demo_conversation(ctx)
            await _settle(0.6 if tab in (LOGS, CHARTS) else 0.2)
            save(name, window)
        created = await demo.create_key("vs-code")
        dialog = NewKeyDialog(created, window)
        dialog.show()
        await _settle()
        save("new-key-dialog", dialog)
        dialog.close()
        tray = TrayController(ctx, open_window=window.show, quit_app=lambda: None, stop_all_and_quit=lambda: None)
        tray.rebuild_menu()
        tray.menu.adjustSize()
        save("tray-menu", tray.menu)
        window.quitting = True
        window.close()
        await ctx.close()
    return written


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args[0]) if args else DEFAULT_OUT
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    logging.basicConfig(level=logging.WARNING)
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    written = qasync.run(shoot(app, out))
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
